package sdn

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/sdn/flows"
	"github.com/sosappliance/sosappliance/sdn/ovstest"
)

// TestStaleTableOfSixtyThousandFlowsPlans: FlowReplyLimit's
// comment (e72c0de) says 3,584 bytes an entry keep "a stale table of some
// 62,000 appliance flows" dumpable, to be shrunk. A real Open vSwitch
// bridge carries the 60,000 owned flows of 20,000 whitelists with port
// ranges; the configuration is shrunk to one whitelist, and Plan (which
// dumps under FlowReplyLimit(len(desired))) must still see them all.
// Written by review (helper-76); it passed.
func TestStaleTableOfSixtyThousandFlowsPlans(t *testing.T) {
	ovstest.Require(t, ovstest.Binaries...)
	inst := ovstest.Start(t)
	big, err := flows.Compile(fixesRangeSwitch(0x7676, 20000))
	if err != nil {
		t.Fatal(err)
	}
	sc := fixesBridge(t, inst, "br76", 0x7676, big, nil)
	small, err := flows.Compile(fixesRangeSwitch(0x7676, 1))
	if err != nil {
		t.Fatal(err)
	}
	entries, counted, _, heap := fixesMeasure(t, sc)
	lim := FlowReplyLimit(len(small))
	t.Logf("%d owned flows; counted %d (%d an entry), heap %d (%d an entry); limit %d bytes = %d entries at this cost",
		entries, counted, counted/entries, heap, int(heap)/entries, lim.Bytes, lim.Bytes/(counted/entries))
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	changes, err := Plan(ctx, sc, small)
	if err != nil {
		t.Fatalf("the shrunk configuration cannot be planned against the %d owned flows its predecessor left: %v", len(big), err)
	}
	t.Logf("plan: %d changes", len(changes.List()))
}

// TestStaleIPv6TableOfFiftyThousandFlowsPlans: the same as
// TestShrinkFromFiftyThousandFlows (the largest owned table the tests put
// on OVS, 50,001 flows) with IPv6 whitelists, whose masked 16-byte
// address matches cost more decoded than IPv4's.
// Written by review (helper-76); it passed.
func TestStaleIPv6TableOfFiftyThousandFlowsPlans(t *testing.T) {
	ovstest.Require(t, ovstest.Binaries...)
	inst := ovstest.Start(t)
	v6 := func(n int) flows.Switch {
		sw := fixesRangeSwitch(0x7677, n)
		for i := range sw.Steers {
			sw.Steers[i].Clients = []netip.Prefix{netip.MustParsePrefix("2001:db8:10::/48")}
			a := netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, byte(i >> 14), byte(i >> 6), byte(i << 2)})
			sw.Steers[i].Servers = []netip.Prefix{netip.PrefixFrom(a, 126)}
		}
		return sw
	}
	big, err := flows.Compile(v6(16667))
	if err != nil {
		t.Fatal(err)
	}
	sc := fixesBridge(t, inst, "br77", 0x7677, big, nil)
	small, err := flows.Compile(v6(1))
	if err != nil {
		t.Fatal(err)
	}
	entries, counted, _, heap := fixesMeasure(t, sc)
	lim := FlowReplyLimit(len(small))
	t.Logf("%d owned flows; counted %d (%d an entry), heap %d (%d an entry); limit %d bytes = %d entries at this cost",
		entries, counted, counted/entries, heap, int(heap)/entries, lim.Bytes, lim.Bytes/(counted/entries))
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	if _, err := Plan(ctx, sc, small); err != nil {
		t.Fatalf("the shrunk IPv6 configuration cannot be planned against the %d owned flows its predecessor left: %v", len(big), err)
	}
}
