package labnet

import (
	"context"
	"errors"
	"math"
	"net/netip"
	"os"
	"strconv"
	"time"

	"github.com/sosappliance/sosappliance/examples/lab/wanem"
)

// The third site of a three-site lab (a config with three sites, `lab
// --sites 3`): a host behind its own agent and switch, on the emulated WAN
// with the other two.
const (
	HostC  Host = "host-c"
	AgentC Host = "agent-c"
)

// HostCAddr is the third site's host.
var HostCAddr = netip.MustParseAddr("10.10.3.10")

// hosts are the lab's namespaces: allHosts, and the third site's.
func (l *Lab) hosts() []Host {
	hs := append([]Host(nil), allHosts...)
	if len(l.sites) == 3 {
		hs = append(hs, HostC, AgentC)
	}
	for _, s := range l.sites {
		hs = append(hs, s.agentHosts[1:]...)
	}
	if l.secondClient() {
		hs = append(hs, Client2)
	}
	return hs
}

// SiteHosts are the end host of each site, in the config's order.
func (l *Lab) SiteHosts() []Host {
	var out []Host
	for _, s := range l.sites {
		out = append(out, s.host)
	}
	return out
}

func (l *Lab) wanStep() string {
	if len(l.sites) == 3 {
		return "WAN emulators: " + l.opts.WAN.String() + " between any two sites, through a hub"
	}
	return "WAN emulator: " + l.opts.WAN.String()
}

// LegLoss is the random loss of each of the two legs a frame crosses
// between two sites of the three-site lab (its site's link to the hub and
// the hub's to the other site) such that the path loses loss of them, as
// the two-site lab's one emulator does: 1 - sqrt(1 - loss).
func LegLoss(loss float64) float64 {
	return 1 - math.Sqrt(1-loss)
}

// startHubWAN joins three sites: each site's WAN veth goes through its own
// emulator into a learning bridge in the WAN namespace, so traffic between
// two sites crosses two emulators. Each gets half the one-way delay, so a
// round trip between any two sites takes the lab's RTT; rate and queue are
// the lab's on every leg, and the random loss is split over the two legs
// (LegLoss), so that the path loses what the lab was set to.
func (l *Lab) startHubWAN(ctx context.Context) error {
	wan := l.Namespace(WANHost)
	for _, step := range [][]string{
		{"ip", "-n", wan, "link", "add", "hub", "mtu", strconv.Itoa(MTU), "type", "bridge"},
		{"ip", "-n", wan, "link", "set", "hub", "up"},
	} {
		if _, err := run(ctx, step[0], step[1:]...); err != nil {
			return err
		}
	}
	w := l.opts.WAN
	var procs []*Process
	for _, s := range l.sites {
		leg := veth{ns: wan, name: "em-" + s.letter, peerNS: wan, peer: "hub-" + s.letter}
		if err := leg.create(ctx); err != nil {
			return err
		}
		if _, err := run(ctx, "ip", "-n", wan, "link", "set", "hub-"+s.letter, "master", "hub"); err != nil {
			return err
		}
		args := []string{"--a", "wan-" + s.letter, "--b", "em-" + s.letter,
			"--delay", (w.RTT / 4).String(),
			"--rate", strconv.FormatInt(w.Rate, 10) + "bit",
			"--loss", strconv.FormatFloat(LegLoss(w.Loss), 'g', -1, 64),
			"--seed", strconv.FormatInt(w.Seed+int64(s.letter[0]), 10)}
		// Each leg delays a quarter of the RTT, and the emulator's own
		// default would size its queue to the leg's round trip, half the
		// path's: the bottleneck leg gets the path's bandwidth-delay
		// product, as the two-site lab's one emulator does.
		queue := wanem.Shape{Delay: w.RTT / 2, Rate: w.Rate, QueueBytes: w.QueueBytes}.EffectiveQueueBytes()
		args = append(args, "--queue", strconv.Itoa(queue))
		p, err := l.start("wanem-"+s.letter, WANHost, nil, l.opts.Wanem, args...)
		if err != nil {
			return err
		}
		procs = append(procs, p)
	}
	return poll(ctx, 10*time.Second, "WAN emulators", func() (bool, error) {
		for _, p := range procs {
			if !p.Ref.Alive() {
				return false, errors.New("wanem exited")
			}
			log, _ := os.ReadFile(p.Ref.Log)
			if !wanem.Joined(string(log)) {
				return false, nil
			}
		}
		return true, nil
	})
}
