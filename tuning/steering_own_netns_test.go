package tuning

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/host/item"
	"github.com/sosappliance/sosappliance/internal/portrange"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// applySteeringInOrder applies steering items in the plan's order: route,
// rule, table.
func applySteeringInOrder(t *testing.T, items []item.Item) error {
	t.Helper()
	s := NewSteering()
	for _, key := range []string{item.SteeringKeyRoute, item.SteeringKeyRule, item.SteeringKeyNftables} {
		for _, it := range items {
			if it.Key == key {
				if err := s.Apply(context.Background(), it); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func itemOf(items []item.Item, key string) item.Item {
	for _, it := range items {
		if it.Key == key {
			return it
		}
	}
	return item.Item{}
}

// TestOwnStrayRoutePrunedInNetns: a route tagged with steering's
// protocol in steering's table that is not the one steering writes (an
// older install's, a hand-made one). Before the route fix of this change
// the route step deleted every route of ours but the one wanted; the fix
// at first kept every route of a table a rule of ours looks up, whatever
// it was, so the plan was never empty and the drift check "corrected" it
// every interval; and a default route of ours of another type in the
// table made RouteAdd fail with EEXIST every convergence. Now only a
// route as steering writes it is kept for a rule, and ours in the wanted
// table go before the add. Found by review (helper-59).
func TestOwnStrayRoutePrunedInNetns(t *testing.T) {
	if !testsupport.InFreshNetns(t, "nft", "ip") {
		return
	}
	run(t, "ip", "link", "set", "lo", "up")
	items := steeringItems(t, testSteeringSpec())
	if err := applySteeringInOrder(t, items); err != nil {
		t.Fatal(err)
	}
	route := itemOf(items, item.SteeringKeyRoute)
	s := NewSteering()
	tbl := strings.Fields(route.Value)[len(strings.Fields(route.Value))-1]

	// 1. A stray non-default route of ours beside the wanted one.
	run(t, "ip", "route", "add", "local", "192.0.2.0/24", "dev", "lo", "table", tbl, "proto", "83")
	got := observeOne(t, s, route)
	t.Logf("observed with a stray route: %q", got.Value)
	err := s.Apply(context.Background(), route)
	after := observeOne(t, s, route)
	t.Logf("apply: %v; observed after: %q\n%s", err, after.Value, run(t, "ip", "route", "show", "table", "all", "proto", "83"))
	if err == nil && after.Value != route.Value {
		t.Errorf("route apply succeeded but the observation stays %q, want %q: the plan is never empty", after.Value, route.Value)
	}

	// 2. A default route of ours of another type in the table.
	run(t, "ip", "route", "del", "local", "0.0.0.0/0", "dev", "lo", "table", tbl)
	run(t, "ip", "route", "add", "unicast", "0.0.0.0/0", "dev", "lo", "table", tbl, "proto", "83")
	err = s.Apply(context.Background(), route)
	after = observeOne(t, s, route)
	t.Logf("apply over an own unicast default: %v; observed after: %q", err, after.Value)
	if err != nil || after.Value != route.Value {
		t.Errorf("route of ours not converged: %v; observed %q, want %q", err, after.Value, route.Value)
	}
}

// TestLargeWhitelistOverTheSendBufferInNetns: the elements go in
// messages of 512, but all in one sendmsg (one nftables transaction), and
// the kernel refuses a netlink send larger than the socket's send buffer
// (wmem_default, 208 KiB) with EMSGSIZE: before, 4,500 disjoint IPv6
// client hosts (9,000 interval elements) failed with "message too long".
// Now the connection's send buffer is steeringSendBuffer. Found by review
// (helper-59).
func TestLargeWhitelistOverTheSendBufferInNetns(t *testing.T) {
	if !testsupport.InFreshNetns(t, "nft", "ip") {
		return
	}
	run(t, "ip", "link", "set", "lo", "up")
	for _, c := range []struct {
		n            int
		first, serve string
		bits         int
	}{{3000, "2001:db8:1::", "2001:db8:2::/64", 128}, {4500, "2001:db8:1::", "2001:db8:2::/64", 128},
		{6000, "2001:db8:1::", "2001:db8:2::/64", 128}, {8000, "10.64.0.0", "10.9.2.0/24", 32}} {
		n := c.n
		var clients []netip.Prefix
		a := netip.MustParseAddr(c.first)
		for range n {
			clients = append(clients, netip.PrefixFrom(a, c.bits))
			a = a.Next().Next()
		}
		spec := item.SteeringSpec{Interface: "sosa0", ListenPort: 9876, Divert: []item.Divert{{
			Clients: clients,
			Servers: []netip.Prefix{netip.MustParsePrefix(c.serve)},
			Ports:   []portrange.Range{portrange.Single(5201)},
		}}}
		table := itemOf(steeringItems(t, spec), item.SteeringKeyNftables)
		err := NewSteering().Apply(context.Background(), table)
		t.Logf("%d client hosts /%d (%d elements): %.200v", n, c.bits, 2*n, err)
		if err != nil {
			t.Errorf("table of %d client hosts /%d not applied: %.200v", n, c.bits, err)
		}
	}
}
