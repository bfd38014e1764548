package relay

import (
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// ProbeRTT, spread.
//
// A stream's BBR (Linux's tcp_bbr) enters ProbeRTT when no RTT sample has
// come in below its min_rtt for 10 s, and then holds 4 segments in flight
// for 200 ms and a round trip. A session's streams start together on one
// path and take their min_rtt together, so they also enter ProbeRTT
// together, every 10 s, and the session's rate falls with them. In the lab
// (16 stripes, 500 Mbit/s, 200 ms) 12 of 16 held a cwnd of 4 at once, and
// the WAN forwarded 85-293 Mbit/s for about 0.3 s. iperf3's CUBIC has no
// such phase.
//
// So once the session's start-up is over, the sending side restarts each
// stream's congestion control once (TCP_CONGESTION to reno and back), at
// offsets spread over probeRTTSpread. BBR's init takes the connection's
// own min RTT again, with a new stamp, so each stream's 10 s count starts
// at its own time, and from then on the streams' ProbeRTTs come one or two
// at a time. The restart also empties BBR's bandwidth filter and puts it
// back in its start-up. On a path of pacingMinRTT or more the stream's
// pacing cap holds it to its share there; its cwnd is kept.
//
// A stream in ProbeRTT (its cwnd at BBR's floor, not in loss recovery) is
// not a carrier in streamShare, so the other streams' caps take up its
// share. Their BBR leaves them the room: its bandwidth filter holds the
// rate of the probe ticks, 1.25 times their share.
const (
	probeRTTSpread = 5 * time.Second
	// bbrMinCwnd is BBR's cwnd in ProbeRTT (bbr_cwnd_min_target).
	bbrMinCwnd = 4
)

// spreadProbeRTT restarts the streams' congestion control, each once and
// at its own offset, as each of the session's start-ups ends (auto's next
// count adds its streams together); housekeeping only. A stream that
// joins while the session cruises (a replacement) starts at its own time
// anyway and waits for the next start-up's end, if any.
func (s *session) spreadProbeRTT(now time.Time, streams []*stream) {
	if !s.pacer.cruising {
		s.probeSpreadDue = true
		return
	}
	if s.probeSpreadDue {
		s.probeSpreadDue = false
		var fresh []*stream
		for _, st := range streams {
			if !st.ccScheduled {
				fresh = append(fresh, st)
			}
		}
		for k, st := range fresh {
			st.ccScheduled = true
			st.ccRestartAt = now.Add(time.Duration(k+1) * probeRTTSpread / time.Duration(len(fresh)))
		}
		return
	}
	for _, st := range streams {
		if st.ccRestartAt.IsZero() || now.Before(st.ccRestartAt) {
			continue
		}
		st.ccRestartAt = time.Time{}
		restarted, err := restartBBR(st.conn)
		if err != nil {
			s.agent.limited.log(s.agent.log, "cc-restart", "relay: restarting a stream's congestion control failed",
				append(s.logAttrs(), "stream", st.index, "err", err)...)
			continue
		}
		if restarted {
			st.ccRestarted.Store(now.UnixNano())
		}
	}
}

// probingRTT reports whether TCP_INFO shows a stream's BBR in ProbeRTT:
// its cwnd at BBR's floor, and not in loss recovery (which counts apart).
func probingRTT(info tcpInfo) bool {
	return info.cwnd > 0 && info.cwnd <= bbrMinCwnd && !lossRecovery(info.caState, info.rtoRetrans)
}

// restartBBR reinitialises a connection's congestion control if it is
// BBR, by setting another and then BBR again: setting the one it has
// changes nothing. Reno is built into every Linux kernel. It reports
// whether the connection ran BBR.
func restartBBR(c *net.TCPConn) (bool, error) {
	restarted := false
	err := onSocket(c, func(fd int) error {
		cc, err := unix.GetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION)
		if err != nil || cc != "bbr" {
			return err
		}
		if err := unix.SetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION, "reno"); err != nil {
			return err
		}
		if err := unix.SetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION, cc); err != nil {
			return err
		}
		restarted = true
		return nil
	})
	return restarted, err
}
