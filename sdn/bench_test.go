package sdn_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/portrange"
	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/sdn"
	"github.com/sosappliance/sosappliance/sdn/flows"
	"github.com/sosappliance/sosappliance/sdn/ovstest"
)

// bigSwitch is a switch with n whitelists, each with its own server.
func bigSwitch(dpid uint64, n int) flows.Switch {
	agent := flows.Agent{Name: "agent-a", MAC: agentMAC, Port: 3}
	sw := flows.Switch{Name: "sw-big", DatapathID: dpid, Forwarding: "normal", Agents: []flows.Agent{agent}}
	for i := range n {
		sw.Steers = append(sw.Steers, flows.Steer{
			Whitelist: fmt.Sprintf("wl-%05d", i), Side: flows.ClientSide,
			Clients: []netip.Prefix{netip.MustParsePrefix("10.10.0.0/16")},
			Server:  netip.AddrFrom4([4]byte{10, 20, byte(i >> 8), byte(i)}), Port: 5201, Agent: agent,
			DependsOn: []string{"agent-a"},
		})
	}
	return sw
}

// rangeSwitch is a switch with n whitelists, each with a server prefix
// and a port list with a range: a GridFTP control port and a data range
// that is not one aligned block (5000-5009 takes 5000-5007 and 5008-5009),
// three flows each.
func rangeSwitch(dpid uint64, n int) flows.Switch {
	agent := flows.Agent{Name: "agent-a", MAC: agentMAC, Port: 3}
	sw := flows.Switch{Name: "sw-big", DatapathID: dpid, Forwarding: "normal", Agents: []flows.Agent{agent}}
	for i := range n {
		sw.Steers = append(sw.Steers, flows.Steer{
			Whitelist: fmt.Sprintf("wl-%05d", i), Side: flows.ClientSide,
			Clients: []netip.Prefix{netip.MustParsePrefix("10.10.0.0/16")},
			Servers: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(20 + i>>14), byte(i >> 6), byte(i << 2)}), 30)},
			Ports:   []portrange.Range{{Lo: 2811, Hi: 2811}, {Lo: 5000, Hi: 5009}},
			Agent:   agent, DependsOn: []string{"agent-a"},
		})
	}
	return sw
}

// BenchmarkConverge10k converges 10,000 whitelist entries into an empty
// Open vSwitch table and then reconciles the unchanged table, against the
// same work done by ovs-ofctl (add-flows, then replace-flows with the same
// file) in the same run.
func BenchmarkConverge10k(b *testing.B) { benchConverge(b, bigSwitch(0xc1, 10000)) }

// BenchmarkConverge10kRanges is the same with 10,000 whitelists of server
// prefixes and port ranges (30,000 value/mask flows).
func BenchmarkConverge10kRanges(b *testing.B) { benchConverge(b, rangeSwitch(0xc1, 10000)) }

func benchConverge(b *testing.B, sw flows.Switch) {
	inst := ovstest.Start(b)
	port := inst.FreePort(b)
	br := inst.AddBridge(b, "brb", sw.DatapathID, fmt.Sprintf("ptcp:%d:127.0.0.1", port))
	desired, err := flows.Compile(sw)
	if err != nil {
		b.Fatal(err)
	}
	file := filepath.Join(b.TempDir(), "flows.txt")
	var text strings.Builder
	for _, f := range desired {
		text.WriteString(f.String() + "\n")
	}
	if err := os.WriteFile(file, []byte(text.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var sc *sdn.SwitchConn
	if !testsupport.Poll(20*time.Second, func() bool {
		sc, err = sdn.Dial(ctx, fmt.Sprintf("tcp:127.0.0.1:%d", port), sdn.ConnOptions{Dial: inst.DialContext, Keepalive: 10 * time.Second})
		return err == nil
	}) {
		b.Fatal(err)
	}
	defer sc.Close()

	var ours, oursNoop, ofctl, ofctlNoop time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		if _, err := br.Ofctl("del-flows"); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if _, err := br.Ofctl("add-flows", file); err != nil {
			b.Fatal(err)
		}
		ofctl += time.Since(start)
		start = time.Now()
		if _, err := br.Ofctl("replace-flows", file); err != nil {
			b.Fatal(err)
		}
		ofctlNoop += time.Since(start)
		// ovs-ofctl's flows carry our cookies: the converge below must
		// find nothing to do, which also proves both installed the same.
		if res, err := sdn.ConvergeOnce(ctx, sc, desired); err != nil || res.Sent != 0 {
			b.Fatalf("after ovs-ofctl add-flows: sent %d, %v", res.Sent, err)
		}
		if err := sc.RemoveOwnedFlows(ctx); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()

		start = time.Now()
		res, err := sdn.ConvergeOnce(ctx, sc, desired)
		if err != nil || res.Sent != len(desired) {
			b.Fatalf("converge: sent %d of %d, %v", res.Sent, len(desired), err)
		}
		ours += time.Since(start)
		start = time.Now()
		res, err = sdn.ConvergeOnce(ctx, sc, desired)
		if err != nil || res.Sent != 0 {
			b.Fatalf("no-change reconcile sent %d, %v", res.Sent, err)
		}
		oursNoop += time.Since(start)
	}
	n := float64(b.N)
	b.ReportMetric(float64(len(desired))*n/ours.Seconds(), "flows/s")
	b.ReportMetric(float64(oursNoop.Milliseconds())/n, "noop-ms")
	b.ReportMetric(float64(len(desired))*n/ofctl.Seconds(), "ofctl-flows/s")
	b.ReportMetric(float64(ofctlNoop.Milliseconds())/n, "ofctl-noop-ms")
	b.ReportMetric(ofctl.Seconds()/ours.Seconds(), "speedup-vs-ofctl")
	b.ReportMetric(ofctlNoop.Seconds()/oursNoop.Seconds(), "noop-speedup-vs-ofctl")
}
