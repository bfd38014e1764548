// Package measure runs the lab's transfers with iperf3 between the client
// and the server and reads what the server received, with a live rate taken
// from the receiving interface while a transfer runs.
package measure

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/sosappliance/sosappliance/examples/lab/labnet"
)

// Transfer is one iperf3 run from the client to the server.
type Transfer struct {
	// Label names the run in progress lines and tables.
	Label string
	// Port is the server port; whether it is whitelisted decides whether
	// sosappliance carries the transfer.
	Port int
	// Parallel is iperf3's -P: TCP connections opened by the end host.
	Parallel int
	// Duration is the measured time; Omit is the slow start before it that
	// iperf3 runs but leaves out of the result.
	Duration time.Duration
	Omit     time.Duration
	// Reverse makes the server send and the client receive (iperf3 -R).
	Reverse bool
}

// Result is what one transfer achieved.
type Result struct {
	Transfer
	// ReceivedBps is the rate the receiving end saw over the measured time.
	ReceivedBps float64
	// SentBps is the rate the sending application wrote; it may be higher
	// than ReceivedBps when data was still buffered at the end.
	SentBps     float64
	Retransmits int
	Bytes       int64
	Seconds     float64
	// PerConnectionBps is what the receiver saw on each of iperf3's -P
	// connections, in iperf3's order; its sum is ReceivedBps.
	PerConnectionBps []float64
	// ServerSeconds and ClientSeconds are each end's per-second rates,
	// as iperf3 read or wrote them; ReceiverSeconds picks the receiver's.
	ServerSeconds, ClientSeconds []Interval
}

// Interval is one of iperf3's per-second reports over the measured time
// (the omitted slow start is left out). Start and End are seconds since
// the measured time began on that end's clock; the last interval may be
// shorter or longer than a second.
type Interval struct {
	Start, End float64
	Bps        float64
}

// ReceiverSeconds are the per-second rates the receiving application read:
// the server's, or the client's under Reverse. Unlike the interface's
// rate in Sample, they start and stop with the test on the receiver's
// clock, so no second of them holds time after the test ended there.
func (r Result) ReceiverSeconds() []Interval {
	if r.Reverse {
		return r.ClientSeconds
	}
	return r.ServerSeconds
}

// Sample is the state of a running transfer, taken about once a second.
type Sample struct {
	// Flowing turns true once data arrives; before that iperf3 is still
	// opening its connections, one round trip or more each.
	Flowing bool
	// Elapsed is the time since data began to arrive (slow start
	// included), Total the time iperf3 will send for.
	Elapsed, Total time.Duration
	// Waiting is the time since the transfer was started.
	Waiting time.Duration
	// Bps is the receiving interface's rate over the last second.
	Bps float64
}

// Progress receives a Sample about once a second while a transfer runs.
type Progress func(Sample)

// Server runs an iperf3 server in the lab's server host on each port.
func Server(ctx context.Context, lab *labnet.Lab, ports ...int) ([]*labnet.Process, error) {
	var procs []*labnet.Process
	for _, port := range ports {
		// -J makes the server's report JSON, which the client fetches
		// (--get-server-output) for the receiver's per-second rates.
		p, err := lab.Start(fmt.Sprintf("iperf3-server-%d", port), labnet.Server, "iperf3", "-s", "-J", "-p", strconv.Itoa(port))
		if err != nil {
			return procs, err
		}
		procs = append(procs, p)
	}
	// Listening is checked from inside the server so that no probe crosses
	// the switches and no whitelisted session is opened for it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := lab.Run(ctx, labnet.Server, "ss", "-Hltn")
		if err == nil && allListening(out, ports) {
			return procs, nil
		}
		if time.Now().After(deadline) {
			return procs, fmt.Errorf("iperf3 servers on %v are not listening: %v", ports, err)
		}
		select {
		case <-ctx.Done():
			return procs, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func allListening(ss string, ports []int) bool {
	for _, p := range ports {
		if !strings.Contains(ss, ":"+strconv.Itoa(p)+" ") {
			return false
		}
	}
	return true
}

// Run runs the transfer and returns what the receiving side measured.
func Run(ctx context.Context, lab *labnet.Lab, tr Transfer, progress Progress) (Result, error) {
	if tr.Parallel < 1 {
		tr.Parallel = 1
	}
	secs := func(d time.Duration) string { return strconv.Itoa(int(d.Round(time.Second) / time.Second)) }
	args := []string{"-c", labnet.ServerAddr.String(), "-p", strconv.Itoa(tr.Port),
		"-t", secs(tr.Duration), "-O", secs(tr.Omit), "-P", strconv.Itoa(tr.Parallel),
		"--connect-timeout", "10000", "-J", "--get-server-output"}
	if tr.Reverse {
		args = append(args, "-R")
	}
	total := tr.Duration + tr.Omit
	// iperf3 waits for the last data to drain and the server's report;
	// over a lossy WAN that can take a while, but never minutes.
	runCtx, cancel := context.WithTimeout(ctx, total+90*time.Second)
	defer cancel()
	cmd := lab.Command(runCtx, labnet.Client, "iperf3", args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		return Result{}, fmt.Errorf("%s: %w", tr.Label, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	receiver := labnet.Server
	if tr.Reverse {
		receiver = labnet.Client
	}
	err := watch(runCtx, lab, receiver, total, done, progress)
	if err != nil {
		if ctx.Err() != nil {
			return Result{}, ctx.Err()
		}
		return Result{}, fmt.Errorf("%s: iperf3 %s: %w: %s%s", tr.Label, strings.Join(args, " "), err,
			strings.TrimSpace(errb.String()), jsonError(out.Bytes()))
	}
	res, err := Parse(out.Bytes())
	if err != nil {
		return Result{}, fmt.Errorf("%s: %w", tr.Label, err)
	}
	res.Transfer = tr
	return res, nil
}

// watch waits for iperf3 and meanwhile reports the receiver's rate.
func watch(ctx context.Context, lab *labnet.Lab, receiver labnet.Host, total time.Duration, done <-chan error, progress Progress) error {
	start := time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	lastBytes, lastAt := int64(-1), time.Time{}
	var flowingSince time.Time
	for {
		select {
		case err := <-done:
			return err
		case <-tick.C:
			if progress == nil {
				continue
			}
			n, err := RxBytes(ctx, lab, receiver)
			now := time.Now()
			if err != nil {
				continue
			}
			s := Sample{Total: total, Waiting: now.Sub(start)}
			if lastBytes >= 0 {
				s.Bps = float64(n-lastBytes) * 8 / now.Sub(lastAt).Seconds()
			}
			lastBytes, lastAt = n, now
			// A trickle of control traffic is not the transfer.
			if flowingSince.IsZero() && s.Bps > 1e6 {
				flowingSince = now.Add(-time.Second)
			}
			if !flowingSince.IsZero() {
				s.Flowing, s.Elapsed = true, now.Sub(flowingSince)
			}
			progress(s)
		}
	}
}

// RxBytes is the byte count received on a host's eth0.
func RxBytes(ctx context.Context, lab *labnet.Lab, h labnet.Host) (int64, error) {
	out, err := exec.CommandContext(ctx, "ip", "-n", lab.Namespace(h), "-s", "-j", "link", "show", "dev", "eth0").Output()
	if err != nil {
		return 0, fmt.Errorf("rx bytes of %s: %w", h, err)
	}
	var links []struct {
		Stats struct {
			RX struct {
				Bytes int64 `json:"bytes"`
			} `json:"rx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal(out, &links); err != nil || len(links) != 1 {
		return 0, fmt.Errorf("ip -s -j link: %q: %v", out, err)
	}
	return links[0].Stats.RX.Bytes, nil
}

// iperfReport is the part of iperf3's -J output the lab reads.
type iperfReport struct {
	Error     string          `json:"error"`
	Intervals []iperfInterval `json:"intervals"`
	// Server is the server's own report (--get-server-output, server -J).
	Server *iperfReport `json:"server_output_json"`
	Start  struct {
		Connected []struct {
			LocalHost  string `json:"local_host"`
			LocalPort  int    `json:"local_port"`
			RemoteHost string `json:"remote_host"`
			RemotePort int    `json:"remote_port"`
		} `json:"connected"`
	} `json:"start"`
	End struct {
		SumSent struct {
			Bytes         int64   `json:"bytes"`
			Seconds       float64 `json:"seconds"`
			BitsPerSecond float64 `json:"bits_per_second"`
			Retransmits   int     `json:"retransmits"`
		} `json:"sum_sent"`
		SumReceived struct {
			Bytes         int64   `json:"bytes"`
			Seconds       float64 `json:"seconds"`
			BitsPerSecond float64 `json:"bits_per_second"`
		} `json:"sum_received"`
		Streams []struct {
			Receiver struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"receiver"`
		} `json:"streams"`
	} `json:"end"`
}

type iperfInterval struct {
	Sum struct {
		Start         float64 `json:"start"`
		End           float64 `json:"end"`
		BitsPerSecond float64 `json:"bits_per_second"`
		Omitted       bool    `json:"omitted"`
	} `json:"sum"`
}

// measured are the intervals of the measured time, the omitted slow
// start left out.
func measured(ivs []iperfInterval) []Interval {
	var out []Interval
	for _, iv := range ivs {
		if !iv.Sum.Omitted {
			out = append(out, Interval{Start: iv.Sum.Start, End: iv.Sum.End, Bps: iv.Sum.BitsPerSecond})
		}
	}
	return out
}

// Parse reads iperf3's JSON report. The omitted slow start is already left
// out of iperf3's sums.
func Parse(report []byte) (Result, error) {
	var r iperfReport
	if err := json.Unmarshal(report, &r); err != nil {
		return Result{}, fmt.Errorf("iperf3 report: %w", err)
	}
	if r.Error != "" {
		return Result{}, fmt.Errorf("iperf3: %s", r.Error)
	}
	recv := r.End.SumReceived
	if recv.Seconds <= 0 {
		return Result{}, errors.New("iperf3 report has no received sum")
	}
	res := Result{
		ReceivedBps: recv.BitsPerSecond,
		SentBps:     r.End.SumSent.BitsPerSecond,
		Retransmits: r.End.SumSent.Retransmits,
		Bytes:       recv.Bytes,
		Seconds:     recv.Seconds,

		ClientSeconds: measured(r.Intervals),
	}
	if r.Server != nil {
		res.ServerSeconds = measured(r.Server.Intervals)
	}
	for _, st := range r.End.Streams {
		res.PerConnectionBps = append(res.PerConnectionBps, st.Receiver.BitsPerSecond)
	}
	return res, nil
}

// ClientPorts returns the client's local ports of the connections in an
// iperf3 report, to look them up at the agents.
func ClientPorts(report []byte) ([]netip.AddrPort, error) {
	var r iperfReport
	if err := json.Unmarshal(report, &r); err != nil {
		return nil, fmt.Errorf("iperf3 report: %w", err)
	}
	var out []netip.AddrPort
	for _, c := range r.Start.Connected {
		addr, err := netip.ParseAddr(c.LocalHost)
		if err != nil {
			return nil, fmt.Errorf("iperf3 report: %w", err)
		}
		out = append(out, netip.AddrPortFrom(addr, uint16(c.LocalPort)))
	}
	return out, nil
}

func jsonError(report []byte) string {
	var r iperfReport
	if json.Unmarshal(report, &r) == nil && r.Error != "" {
		return " (" + r.Error + ")"
	}
	return ""
}
