package tuning

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/sosappliance/sosappliance/host/item"
	"github.com/sosappliance/sosappliance/internal/portrange"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

func testSteeringSpec() item.SteeringSpec {
	return item.SteeringSpec{
		Interface:  "sosa0",
		ListenPort: 9876,
		Divert: []item.Divert{
			{Clients: []netip.Prefix{netip.MustParsePrefix("10.9.1.0/24")}, Server: netip.MustParseAddr("10.9.2.1"), Port: 5201},
			{Clients: []netip.Prefix{netip.MustParsePrefix("10.9.3.0/24"), netip.MustParsePrefix("10.9.4.7/32")}, Server: netip.MustParseAddr("10.9.2.2"), Port: 80},
			{Clients: []netip.Prefix{netip.MustParsePrefix("10.9.1.0/24")}, Servers: []netip.Prefix{netip.MustParsePrefix("10.9.5.16/28")},
				Ports: []portrange.Range{{Lo: 2811, Hi: 2811}, {Lo: 50000, Hi: 51000}}},
		},
		Replies: []item.Divert{
			{Clients: []netip.Prefix{netip.MustParsePrefix("10.9.6.0/24")}, Servers: []netip.Prefix{netip.MustParsePrefix("10.9.1.0/28")},
				Ports: []portrange.Range{{Lo: 5000, Hi: 5099}}},
		},
	}
}

// steeringItems returns the steering/* items of a spec (without the
// rp_filter sysctl).
func steeringItems(t *testing.T, spec item.SteeringSpec) []item.Item {
	t.Helper()
	items, err := spec.Items()
	if err != nil {
		t.Fatal(err)
	}
	var out []item.Item
	for _, it := range items {
		if it.Kind == item.KindSteering {
			out = append(out, it)
		}
	}
	return out
}

func observeOne(t *testing.T, ex Executor, it item.Item) item.Observation {
	t.Helper()
	obs, err := ex.Observe(context.Background(), []item.Item{it})
	if err != nil {
		t.Fatalf("observe %s: %v", it.ID(), err)
	}
	return obs[0]
}

func TestSteeringAppliesOwnedObjectsOnlyInNetns(t *testing.T) {
	if !testsupport.InFreshNetns(t, "nft", "ip") {
		return
	}
	ctx := context.Background()
	// Someone else's table and policy rule, which must survive everything.
	run(t, "nft", "add table ip foreign; add chain ip foreign pre { type filter hook prerouting priority mangle; }; add rule ip foreign pre meta mark set 0x7 counter")
	run(t, "ip", "rule", "add", "fwmark", "0x7", "lookup", "77", "priority", "700")
	foreignTable := run(t, "nft", "list", "table", "ip", "foreign")

	ex := NewSteering()
	items := steeringItems(t, testSteeringSpec())
	for _, it := range items {
		if o := observeOne(t, ex, it); o.Present {
			t.Fatalf("%s present before apply: %+v", it.ID(), o)
		}
	}
	for _, it := range items {
		if err := ex.Apply(ctx, it); err != nil {
			t.Fatalf("apply %s: %v", it.ID(), err)
		}
		if o := observeOne(t, ex, it); !o.Present || o.Value != it.Value {
			t.Fatalf("%s after apply = %+v, want %q", it.ID(), o, it.Value)
		}
		// Applying again changes nothing.
		if err := ex.Apply(ctx, it); err != nil {
			t.Fatalf("re-apply %s: %v", it.ID(), err)
		}
	}

	ruleset := run(t, "nft", "list", "table", "ip", SteeringTable)
	for _, want := range []string{
		"type filter hook prerouting priority mangle; policy accept;",
		// Traffic no switch steers here leaves at once.
		`iifname != "sosa0" accept`,
		"ip saddr != @steered accept",
		"set steered {\n\t\ttype ipv4_addr\n\t\tflags interval\n\t\telements = { 10.9.1.0/24, 10.9.3.0/24,\n\t\t\t     10.9.4.7 }",
		"meta l4proto tcp socket transparent 1 meta mark set 0x0000534f accept",
		// One rule per divert, its addresses and ports in interval
		// sets, taking only a connection's first SYN.
		`iifname "sosa0" ip saddr @clients0 ip daddr @servers0 tcp dport @ports0 tcp flags syn / fin,syn,rst,ack meta mark set 0x0000534f tproxy to :9876 accept`,
		`iifname "sosa0" ip saddr @clients2 ip daddr @servers2 tcp dport @ports2 tcp flags syn / fin,syn,rst,ack meta mark set 0x0000534f tproxy to :9876 accept`,
		// The divert's other packets, and the replies', are sent on.
		`iifname "sosa0" ip saddr @clients2 ip daddr @servers2 tcp dport @ports2 fib daddr type unicast ip ttl > 1 dup to ip daddr device iif drop`,
		`iifname "sosa0" ip saddr @rservers0 ip daddr @rclients0 tcp sport @rports0 fib daddr type unicast ip ttl > 1 dup to ip daddr device iif drop`,
		"set rservers0 {\n\t\ttype ipv4_addr\n\t\tflags interval\n\t\telements = { 10.9.1.0/28 }",
		"set rports0 {\n\t\ttype inet_service\n\t\tflags interval\n\t\telements = { 5000-5099 }",
		"set clients0 {\n\t\ttype ipv4_addr\n\t\tflags interval\n\t\telements = { 10.9.1.0/24 }",
		"set servers0 {\n\t\ttype ipv4_addr\n\t\tflags interval\n\t\telements = { 10.9.2.1 }",
		"set ports0 {\n\t\ttype inet_service\n\t\tflags interval\n\t\telements = { 5201 }",
		"elements = { 10.9.3.0/24, 10.9.4.7 }",
		"set servers2 {\n\t\ttype ipv4_addr\n\t\tflags interval\n\t\telements = { 10.9.5.16/28 }",
		"set ports2 {\n\t\ttype inet_service\n\t\tflags interval\n\t\telements = { 2811, 50000-51000 }",
	} {
		if !strings.Contains(ruleset, want) {
			t.Errorf("nft ruleset lacks %q:\n%s", want, ruleset)
		}
	}
	if rules := run(t, "ip", "rule", "show"); !strings.Contains(rules, "21327:\tfrom all fwmark 0x534f lookup 21327 proto 83") {
		t.Errorf("ip rule show:\n%s", rules)
	}
	if routes := run(t, "ip", "route", "show", "table", "21327"); !strings.Contains(routes, "local default dev lo proto 83 scope host") {
		t.Errorf("ip route show table 21327:\n%s", routes)
	}

	// A changed spec converges in place.
	spec := testSteeringSpec()
	spec.Divert = spec.Divert[:1]
	spec.Mark, spec.RouteTable, spec.RulePriority = 0x99, 99, 990
	for _, it := range steeringItems(t, spec) {
		if err := ex.Apply(ctx, it); err != nil {
			t.Fatalf("apply changed %s: %v", it.ID(), err)
		}
		if o := observeOne(t, ex, it); o.Value != it.Value {
			t.Fatalf("%s after change = %q, want %q", it.ID(), o.Value, it.Value)
		}
	}
	if rules := run(t, "ip", "rule", "show"); strings.Contains(rules, "0x534f") || !strings.Contains(rules, "fwmark 0x99 lookup 99 proto 83") {
		t.Errorf("after change, ip rule show:\n%s", rules)
	}
	if routes := run(t, "ip", "route", "show", "table", "21327"); strings.TrimSpace(routes) != "" {
		t.Errorf("old route table still has routes:\n%s", routes)
	}

	// Content added by hand makes the table unrecognised; apply replaces it.
	run(t, "nft", "add rule ip sosappliance prerouting counter")
	nft := steeringItems(t, spec)[0]
	if o := observeOne(t, ex, nft); o.Value == nft.Value || !strings.Contains(o.Value, "not as sosappliance writes it") {
		t.Fatalf("tampered table observed as %q", o.Value)
	}
	if err := ex.Apply(ctx, nft); err != nil {
		t.Fatal(err)
	}
	if o := observeOne(t, ex, nft); o.Value != nft.Value {
		t.Fatalf("after repair: %q", o.Value)
	}

	for _, it := range items {
		if err := ex.Remove(ctx, it); err != nil {
			t.Fatalf("remove %s: %v", it.ID(), err)
		}
		if o := observeOne(t, ex, it); o.Present {
			t.Fatalf("%s present after remove: %+v", it.ID(), o)
		}
		if err := ex.Remove(ctx, it); err != nil {
			t.Fatalf("second remove %s: %v", it.ID(), err)
		}
	}
	if got := run(t, "nft", "list", "table", "ip", "foreign"); got != foreignTable {
		t.Errorf("foreign table changed:\n%s\nwas:\n%s", got, foreignTable)
	}
	if rules := run(t, "ip", "rule", "show"); !strings.Contains(rules, "700:\tfrom all fwmark 0x7 lookup 77") {
		t.Errorf("foreign rule gone:\n%s", rules)
	}
}

// The steering state must really divert: a client in another namespace
// connects to a server address that exists nowhere, through the agent, and
// the agent's transparent listener accepts it with that server address as
// its local address.
func TestSteeringDivertsToTransparentListenerInNetns(t *testing.T) {
	if !testsupport.InFreshNetns(t, "nft", "ip", "curl") {
		return
	}
	client, _ := divertTopology(t)

	spec := testSteeringSpec()
	items, err := spec.Items()
	if err != nil {
		t.Fatal(err)
	}
	exs := Executors("/")
	for _, it := range items {
		if err := exs[it.Kind].Apply(context.Background(), it); err != nil {
			t.Fatalf("apply %s: %v", it.ID(), err)
		}
	}
	if got := strings.TrimSpace(run(t, "sysctl", "-n", "net.ipv4.conf.sosa0.rp_filter")); got != "2" {
		t.Fatalf("rp_filter = %q", got)
	}

	ln := transparentListener(t, "0.0.0.0:9876")
	accepted := make(chan string, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.SetDeadline(time.Now().Add(10 * time.Second))
			buf := make([]byte, 4096)
			c.Read(buf)
			fmt.Fprintf(c, "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok")
			accepted <- c.LocalAddr().String() + " " + c.RemoteAddr().String()
			c.Close()
		}
	}()

	// One port, a port inside a range and a server inside a prefix are
	// diverted; the port just past the range is not.
	for _, target := range []string{"10.9.2.1:5201", "10.9.5.20:50999", "10.9.5.31:2811"} {
		out := run(t, "ip", "netns", "exec", client, "curl", "-sS", "--max-time", "10", "http://"+target+"/")
		if out != "ok" {
			t.Fatalf("curl to %s through the agent got %q", target, out)
		}
		if got := <-accepted; !strings.HasPrefix(got, target+" 10.9.1.10:") {
			t.Fatalf("listener saw %q, want local %s from 10.9.1.10", got, target)
		}
	}
	if out, err := exec.Command("ip", "netns", "exec", client, "curl", "-sS", "--max-time", "2", "http://10.9.5.20:51001/").CombinedOutput(); err == nil {
		t.Fatalf("a port outside the range reached a listener: %s", out)
	}
	select {
	case got := <-accepted:
		t.Fatalf("a port outside the range was diverted: %s", got)
	default:
	}
}

// The pattern other packages use in their namespace tests: a named
// namespace, the executors run through RunInNetns, the host untouched.
func TestRunInNetnsConfinesSteeringToTheNamespace(t *testing.T) {
	testsupport.RequireRoot(t, "ip", "nft")
	name := fmt.Sprintf("sostun%d", os.Getpid())
	run(t, "ip", "netns", "add", name)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	ns, err := netns.GetFromName(name)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	hostTables := run(t, "nft", "list", "tables")
	hostRules := run(t, "ip", "rule", "show")

	spec := testSteeringSpec()
	spec.Interface = ""
	items := steeringItems(t, spec)
	ex := NewSteering()
	err = RunInNetns(ns, func() error {
		for _, it := range items {
			if err := ex.Apply(context.Background(), it); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if out := run(t, "ip", "netns", "exec", name, "nft", "list", "table", "ip", SteeringTable); !strings.Contains(out, "tproxy to :9876") {
		t.Errorf("namespace table:\n%s", out)
	}
	if out := run(t, "ip", "-n", name, "rule", "show"); !strings.Contains(out, "lookup 21327 proto 83") {
		t.Errorf("namespace rules:\n%s", out)
	}
	if got := run(t, "nft", "list", "tables"); got != hostTables {
		t.Errorf("host tables changed:\n%s\nwas\n%s", got, hostTables)
	}
	if got := run(t, "ip", "rule", "show"); got != hostRules {
		t.Errorf("host rules changed:\n%s\nwas\n%s", got, hostRules)
	}
	err = RunInNetns(ns, func() error {
		obs, err := ex.Observe(context.Background(), items)
		for i, o := range obs {
			if !o.Present || o.Value != items[i].Value {
				return fmt.Errorf("observed %+v, want %q", o, items[i].Value)
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestSteeringIPv6InNetns: IPv6 diverts go to table ip6 with IPv6 interval
// sets, and the mark's policy rule and local route exist for IPv6 too;
// all of it reads back as the desired items.
func TestSteeringIPv6InNetns(t *testing.T) {
	testsupport.RequireRoot(t, "ip", "nft")
	name := fmt.Sprintf("sost6%d", os.Getpid())
	run(t, "ip", "netns", "add", name)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	run(t, "ip", "-n", name, "link", "set", "lo", "up")
	ns, err := netns.GetFromName(name)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	spec := testSteeringSpec()
	spec.Divert = append(spec.Divert, item.Divert{
		Clients: []netip.Prefix{netip.MustParsePrefix("2001:db8:1::/48")},
		Servers: []netip.Prefix{netip.MustParsePrefix("2001:db8:2::/124")},
		Ports:   []portrange.Range{{Lo: 5201, Hi: 5201}, {Lo: 50000, Hi: 51000}}})
	items := steeringItems(t, spec)
	ex := NewSteering()
	err = RunInNetns(ns, func() error {
		for _, it := range items {
			if err := ex.Apply(context.Background(), it); err != nil {
				return err
			}
		}
		obs, err := ex.Observe(context.Background(), items)
		for i, o := range obs {
			if !o.Present || o.Value != items[i].Value {
				return fmt.Errorf("observed %+v, want %q", o, items[i].Value)
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	v6 := run(t, "ip", "netns", "exec", name, "nft", "list", "table", "ip6", SteeringTable)
	for _, want := range []string{
		"meta l4proto tcp socket transparent 1 meta mark set 0x0000534f accept",
		`iifname "sosa0" ip6 saddr @clients0 ip6 daddr @servers0 tcp dport @ports0 tcp flags syn / fin,syn,rst,ack meta mark set 0x0000534f tproxy to :9876 accept`,
		`iifname "sosa0" ip6 saddr @clients0 ip6 daddr @servers0 tcp dport @ports0 fib daddr type unicast ip6 hoplimit > 1 dup to ip6 daddr device iif drop`,
		"type ipv6_addr\n\t\tflags interval\n\t\telements = { 2001:db8:1::/48 }",
		"type ipv6_addr\n\t\tflags interval\n\t\telements = { 2001:db8:2::/124 }",
		"elements = { 5201, 50000-51000 }",
	} {
		if !strings.Contains(v6, want) {
			t.Errorf("table ip6 lacks %q:\n%s", want, v6)
		}
	}
	if v4 := run(t, "ip", "netns", "exec", name, "nft", "list", "table", "ip", SteeringTable); strings.Contains(v4, "2001:db8") {
		t.Errorf("IPv6 diverts in table ip:\n%s", v4)
	}
	if out := run(t, "ip", "-6", "-n", name, "rule", "show"); !strings.Contains(out, "from all fwmark 0x534f lookup 21327 proto 83") {
		t.Errorf("IPv6 rules:\n%s", out)
	}
	if out := run(t, "ip", "-6", "-n", name, "route", "show", "table", "21327"); !strings.Contains(out, "local default dev lo proto 83") {
		t.Errorf("IPv6 steering route:\n%s", out)
	}
	// A missing IPv6 route is drift, repaired by apply.
	run(t, "ip", "-6", "-n", name, "route", "flush", "table", "21327")
	route := items[len(items)-1]
	err = RunInNetns(ns, func() error {
		obs, err := ex.Observe(context.Background(), []item.Item{route})
		if err != nil || obs[0].Value == route.Value {
			return fmt.Errorf("route observed %q (%v) without its IPv6 half", obs[0].Value, err)
		}
		return ex.Apply(context.Background(), route)
	})
	if err != nil {
		t.Fatal(err)
	}
}
