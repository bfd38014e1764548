package item

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/internal/portrange"
)

// TestOneIPv6ServerIsOneAddress: Divert.Server is "the form for
// one server". Normalize turns it into a prefix of length 32 whatever its
// family, so one IPv6 server 2001:db8:2::5 becomes 2001:db8::/32 and the
// steering table diverts every host of that /32 to the relay.
// Found by review (helper-70): one IPv6 server became a /32.
func TestOneIPv6ServerIsOneAddress(t *testing.T) {
	tp := TproxyRules{Mark: 1, ListenPort: 9876, Divert: []Divert{{
		Clients: []netip.Prefix{netip.MustParsePrefix("2001:db8:1::/48")},
		Server:  netip.MustParseAddr("2001:db8:2::5"),
		Port:    5201,
	}}}
	n, err := tp.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	want := netip.MustParsePrefix("2001:db8:2::5/128")
	if len(n.Divert) != 1 || len(n.Divert[0].Servers) != 1 || n.Divert[0].Servers[0] != want {
		t.Errorf("one IPv6 server: servers %v, want [%v]", n.Divert[0].Servers, want)
	}
	// The same through an item value, as a stored or hand-written value
	// is read.
	v, err := CanonicalSteeringValue(SteeringKeyNftables,
		`{"mark":1,"listen_port":9876,"divert":[{"clients":["2001:db8:1::/48"],"server":"2001:db8:2::5","port":5201}]}`)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(v, `"2001:db8:2::5/128"`) {
		t.Errorf("canonical value %s, want server 2001:db8:2::5/128", v)
	}
	// IPv4 and IPv4-mapped single servers stay /32.
	for _, s := range []string{"198.51.100.9", "::ffff:198.51.100.9"} {
		tp.Divert = []Divert{{Clients: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, Server: netip.MustParseAddr(s), Port: 1}}
		n, err := tp.Normalize()
		if err != nil || n.Divert[0].Servers[0] != netip.MustParsePrefix("198.51.100.9/32") {
			t.Errorf("server %s: %v, %v", s, n.Divert, err)
		}
	}
}

// TestInterfaceNamesTheKernelRefuses: Normalize says it refuses
// what the steering table cannot hold and checks the interface name, but
// lets through names no Linux interface can have (dev_valid_name refuses
// "", ".", "..", and names with '/', ':' or whitespace). An iifname rule on
// such a name never matches: steering would silently divert nothing.
// Found by review (helper-70).
func TestInterfaceNamesTheKernelRefuses(t *testing.T) {
	for _, name := range []string{".", "..", "eth0:1", "eth\t1", "eth\n1"} {
		tp := TproxyRules{Interface: name, Mark: 1, ListenPort: 9876, Divert: []Divert{{
			Clients: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
			Servers: []netip.Prefix{netip.MustParsePrefix("10.1.0.1/32")},
			Ports:   []portrange.Range{portrange.Single(5201)},
		}}}
		if _, err := tp.Normalize(); err == nil {
			t.Errorf("interface %q accepted", name)
		}
	}
}

// TestIDsAreDistinct: the IDs of the items of different kinds and
// keys the package builds never coincide, and each key splits back.
// Written by review (helper-70); it passed.
func TestIDsAreDistinct(t *testing.T) {
	items, err := SteeringSpec{Interface: "eth1.100", ListenPort: 9876, Divert: []Divert{{
		Clients: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
		Server:  netip.MustParseAddr("10.1.0.1"), Port: 5201,
	}}}.Items()
	if err != nil {
		t.Fatal(err)
	}
	for _, ifn := range []string{"eth1", "eth1.100", "mtu", "a/b"} {
		for _, s := range []string{SettingMTU, SettingTxQueueLen} {
			items = append(items, Item{Kind: KindInterface, Key: InterfaceKey(ifn, s), Value: "1"})
		}
		items = append(items, Item{Kind: KindIRQ, Key: ifn, Value: "0"}, Item{Kind: KindSysctl, Key: RPFilterKey(ifn), Value: "2"})
	}
	items = append(items, Item{Kind: KindRelay, Key: RelayKeyCPUs, Value: "0"})
	seen := map[string]Item{}
	for _, it := range items {
		if prev, dup := seen[it.ID()]; dup && prev != it {
			t.Errorf("%+v and %+v share ID %q", prev, it, it.ID())
		}
		seen[it.ID()] = it
	}
	if got := RPFilterKey("eth1.100"); got != "net.ipv4.conf.eth1/100.rp_filter" {
		t.Errorf("RPFilterKey(eth1.100) = %q", got)
	}
}

// FuzzCanonicalSteering: canonical steering values never panic and
// are fixed points (Canonical of a canonical value is itself), so a stored
// value compares equal to a fresh one.
func FuzzCanonicalSteering(f *testing.F) {
	f.Add(SteeringKeyNftables, `{"interface":"eth1","mark":21327,"listen_port":9876,"divert":[{"clients":["10.10.1.0/24"],"server":"10.10.2.1","port":5201}]}`)
	f.Add(SteeringKeyNftables, `{"mark":1,"listen_port":2,"divert":[{"clients":["10.0.0.0/25","10.0.0.128/25"],"servers":["10.1.0.0/24"],"ports":["1-10","5-20"]},{"clients":["::ffff:10.2.0.0/112"],"servers":["10.1.0.0/25","10.1.0.128/25"],"ports":["1-20"]}]}`)
	f.Add(SteeringKeyNftables, `{"mark":1,"divert":[]}`)
	f.Add(SteeringKeyRule, "fwmark 0x534f lookup 21327 priority 21327")
	f.Add(SteeringKeyRoute, "local 0.0.0.0/0 dev lo table 21327")
	f.Fuzz(func(t *testing.T, key, value string) {
		v, err := CanonicalSteeringValue(key, value)
		if err != nil {
			return
		}
		again, err := CanonicalSteeringValue(key, v)
		if err != nil || again != v {
			t.Fatalf("%s %q -> %q -> %q, %v", key, value, v, again, err)
		}
	})
}

// FuzzCanonicalIRQ: the same for irq values.
func FuzzCanonicalIRQ(f *testing.F) {
	for _, s := range []string{"0-3,8", "45:0 46:1-3,5", "46:1 45:0", "0", "1:0\t2:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, value string) {
		if len(value) > 2048 {
			return
		}
		v, err := CanonicalIRQValue(value)
		if err != nil {
			return
		}
		again, err := CanonicalIRQValue(v)
		if err != nil || again != v {
			t.Fatalf("%q -> %q -> %q, %v", value, v, again, err)
		}
	})
}

// moreDiverted reports whether the rule set diverts TCP from c to s:p.
func moreDiverted(ds []Divert, c, s netip.Addr, p uint16) bool {
	for _, d := range ds {
		servers := slices.Clone(d.Servers)
		if d.Server.IsValid() {
			servers = append(servers, netip.PrefixFrom(d.Server, d.Server.BitLen()))
		}
		ports := slices.Clone(d.Ports)
		if d.Port != 0 {
			ports = append(ports, portrange.Single(d.Port))
		}
		if slices.ContainsFunc(d.Clients, func(q netip.Prefix) bool { return q.Contains(c) }) &&
			slices.ContainsFunc(servers, func(q netip.Prefix) bool { return q.Contains(s) }) &&
			portrange.ContainsPort(ports, p) {
			return true
		}
	}
	return false
}

// TestCanonicalKeepsTheDivertedSet: for random IPv4 rule sets,
// the canonical value reads back to itself, and diverts exactly the
// (client, server, port) triples the input diverts, probed at prefix
// edges and at random.
// Written by review (helper-70); it passed.
func TestCanonicalKeepsTheDivertedSet(t *testing.T) {
	rng := rand.New(rand.NewPCG(70, 1))
	addr := func() netip.Addr {
		return netip.AddrFrom4([4]byte{10, byte(rng.IntN(4)), byte(rng.IntN(256)), byte(rng.IntN(256))})
	}
	pfx := func() netip.Prefix { return netip.PrefixFrom(addr(), 14+rng.IntN(19)) }
	for i := 0; i < 300; i++ {
		var ds []Divert
		for j := rng.IntN(4); j >= 0; j-- {
			d := Divert{}
			for k := rng.IntN(3); k >= 0; k-- {
				d.Clients = append(d.Clients, pfx())
			}
			if rng.IntN(2) == 0 {
				d.Server, d.Port = addr(), uint16(1+rng.IntN(20))
			} else {
				for k := rng.IntN(3); k >= 0; k-- {
					d.Servers = append(d.Servers, pfx())
				}
				for k := rng.IntN(3); k >= 0; k-- {
					a, b := uint16(1+rng.IntN(20)), uint16(1+rng.IntN(20))
					d.Ports = append(d.Ports, portrange.Range{Lo: min(a, b), Hi: max(a, b)})
				}
			}
			ds = append(ds, d)
		}
		in := TproxyRules{Interface: "eth1", Mark: 7, ListenPort: 9876, Divert: ds}
		v, err := in.Canonical()
		if err != nil {
			t.Fatalf("%+v: %v", in, err)
		}
		back, err := ParseTproxyRules(v)
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		if v2, _ := back.Canonical(); v2 != v {
			t.Fatalf("canonical %s reads back as %s", v, v2)
		}
		var probes []netip.Addr
		for _, d := range ds {
			for _, q := range slices.Concat(d.Clients, d.Servers) {
				lo := q.Masked().Addr()
				probes = append(probes, lo, lo.Prev(), lastAddr(q), lastAddr(q).Next())
			}
			if d.Server.IsValid() {
				probes = append(probes, d.Server, d.Server.Next(), d.Server.Prev())
			}
		}
		for k := 0; k < 40; k++ {
			probes = append(probes, addr())
		}
		for k := 0; k < 3000; k++ {
			c, s := probes[rng.IntN(len(probes))], probes[rng.IntN(len(probes))]
			p := uint16(rng.IntN(22))
			if !c.IsValid() || !s.IsValid() {
				continue
			}
			if a, b := moreDiverted(ds, c, s, p), moreDiverted(back.Divert, c, s, p); a != b {
				t.Fatalf("%v -> %v:%d: input diverts %v, canonical %v\ninput %+v\ncanonical %s", c, s, p, a, b, ds, v)
			}
		}
	}
}
