package item

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/internal/portrange"
)

// testSteeringSpec is an agent serving two client-side whitelists, one of
// them with two client prefixes.
func testSteeringSpec() SteeringSpec {
	return SteeringSpec{
		Interface:  "sosa0",
		ListenPort: 9876,
		Divert: []Divert{
			{Clients: []netip.Prefix{netip.MustParsePrefix("10.9.1.0/24")}, Server: netip.MustParseAddr("10.9.2.1"), Port: 5201},
			{Clients: []netip.Prefix{netip.MustParsePrefix("10.9.3.0/24"), netip.MustParsePrefix("10.9.4.7/32")}, Server: netip.MustParseAddr("10.9.2.2"), Port: 80},
		},
	}
}

func TestSteeringSpecItems(t *testing.T) {
	items, err := testSteeringSpec().Items()
	if err != nil {
		t.Fatal(err)
	}
	want := []Item{
		{Kind: KindSysctl, Key: "net.ipv4.conf.sosa0.rp_filter", Value: "2"},
		{Kind: KindSteering, Key: SteeringKeyNftables, Value: `{"interface":"sosa0","mark":21327,"listen_port":9876,"divert":[` +
			`{"clients":["10.9.1.0/24"],"servers":["10.9.2.1/32"],"ports":["5201"]},` +
			`{"clients":["10.9.3.0/24","10.9.4.7/32"],"servers":["10.9.2.2/32"],"ports":["80"]}]}`},
		{Kind: KindSteering, Key: SteeringKeyRule, Value: "fwmark 0x534f lookup 21327 priority 21327"},
		{Kind: KindSteering, Key: SteeringKeyRoute, Value: "local 0.0.0.0/0 dev lo table 21327"},
	}
	if len(items) != len(want) {
		t.Fatalf("Items() = %+v", items)
	}
	for i := range want {
		if items[i] != want[i] {
			t.Errorf("item %d:\n got %+v\nwant %+v", i, items[i], want[i])
		}
		if c, err := Canonical(items[i]); err != nil || c != items[i] {
			t.Errorf("item %d is not canonical: %+v %v", i, c, err)
		}
	}
	if got := RPFilterKey("eth1.100"); got != "net.ipv4.conf.eth1/100.rp_filter" {
		t.Errorf("RPFilterKey(vlan) = %q", got)
	}
}

func TestTproxyRulesCanonicalMergesAndSorts(t *testing.T) {
	a := TproxyRules{Mark: 1, ListenPort: 9, Divert: []Divert{
		{Clients: []netip.Prefix{netip.MustParsePrefix("10.0.2.77/24"), netip.MustParsePrefix("10.0.1.0/24")}, Server: netip.MustParseAddr("10.1.0.1"), Port: 80},
		{Clients: []netip.Prefix{netip.MustParsePrefix("10.0.1.0/24")}, Server: netip.MustParseAddr("10.1.0.1"), Port: 80},
		{Clients: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}, Server: netip.MustParseAddr("::ffff:10.1.0.0"), Port: 443},
	}}
	got, err := a.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"mark":1,"listen_port":9,"divert":[{"clients":["0.0.0.0/0"],"servers":["10.1.0.0/32"],"ports":["443"]},{"clients":["10.0.1.0/24","10.0.2.0/24"],"servers":["10.1.0.1/32"],"ports":["80"]}]}`
	if got != want {
		t.Fatalf("Canonical =\n%s\nwant\n%s", got, want)
	}
	// A server-side-only agent: no diverts, so neither port nor interface
	// is part of the table.
	only, err := TproxyRules{Mark: 5, ListenPort: 9, Interface: "eth1"}.Canonical()
	if err != nil || only != `{"mark":5,"divert":[]}` {
		t.Fatalf("no-divert canonical = %q, %v", only, err)
	}
	for _, bad := range []string{
		`{"mark":1,"listen_port":9,"divert":[],"extra":1}`,
		`{"mark":0,"divert":[]}`,
		`{"mark":1,"divert":[{"clients":["10.0.0.0/8"],"server":"10.1.0.1","port":80}]}`,
		`{"mark":1,"listen_port":9,"divert":[{"clients":["fd00::/8"],"server":"10.1.0.1","port":80}]}`,
		`{"mark":1,"listen_port":9,"divert":[{"clients":["10.0.0.0/8"],"server":"fd00::1","port":80}]}`,
		`{"mark":1,"listen_port":9,"divert":[{"clients":[],"server":"10.0.0.1","port":80}]}`,
		`{"mark":1,"listen_port":9,"divert":[{"clients":["10.0.0.0/8"],"server":"10.0.0.1","port":0}]}`,
		`{"mark":1,"interface":"a/b","divert":[]}`,
		`{"mark":1,"divert":[]} {}`,
		`{"mark":1,"listen_port":9,"divert":[{"clients":["10.0.0.0/8"],"servers":["10.0.0.1/32"],"ports":["90-80"]}]}`,
		`{"mark":1,"listen_port":9,"divert":[{"clients":["10.0.0.0/8"],"servers":["10.0.0.1/32"],"ports":[]}]}`,
		`{"mark":1,"listen_port":9,"divert":[{"clients":["10.0.0.0/8"],"servers":[],"ports":["80"]}]}`,
	} {
		if _, err := ParseTproxyRules(bad); err == nil {
			t.Errorf("ParseTproxyRules(%s) succeeded", bad)
		}
	}
}

func TestSteeringRuleAndRouteValues(t *testing.T) {
	r, err := ParseSteeringRule("fwmark 0x10 lookup 100 priority 1000")
	if err != nil || r != (SteeringRule{Mark: 16, Table: 100, Priority: 1000}) || r.String() != "fwmark 0x10 lookup 100 priority 1000" {
		t.Fatalf("ParseSteeringRule = %+v, %v", r, err)
	}
	if c, err := CanonicalSteeringValue(SteeringKeyRule, "fwmark 16  lookup 100 priority 1000"); err != nil || c != "fwmark 0x10 lookup 100 priority 1000" {
		t.Fatalf("canonical rule = %q, %v", c, err)
	}
	for _, bad := range []string{"", "fwmark 0 lookup 1 priority 1", "fwmark 1 lookup 254 priority 1", "fwmark 1 lookup 100 priority 32766", "fwmark 1 table 100 priority 5"} {
		if _, err := ParseSteeringRule(bad); err == nil {
			t.Errorf("ParseSteeringRule(%q) succeeded", bad)
		}
	}
	rt, err := ParseSteeringRoute("local 0.0.0.0/0 dev lo table 100")
	if err != nil || rt.Table != 100 {
		t.Fatalf("ParseSteeringRoute = %+v, %v", rt, err)
	}
	for _, bad := range []string{"local default dev lo table 100", "local 0.0.0.0/0 dev lo table 255", "local 0.0.0.0/0 dev eth0 table 100"} {
		if _, err := ParseSteeringRoute(bad); err == nil {
			t.Errorf("ParseSteeringRoute(%q) succeeded", bad)
		}
	}
	if _, err := CanonicalSteeringValue("chain", "x"); err == nil {
		t.Error("unknown steering key accepted")
	}
}

func FuzzParseTproxyRules(f *testing.F) {
	items, _ := testSteeringSpec().Items()
	f.Add(items[1].Value)
	f.Add(`{"mark":5,"divert":[]}`)
	f.Add(`{"mark":1,"listen_port":9,"divert":[{"clients":["0.0.0.0/0","10.0.0.1/8"],"server":"::ffff:1.2.3.4","port":1}]}`)
	f.Add(`{"mark":1,"divert":null}`)
	f.Add(`{"mark":1,"listen_port":9,"divert":[{"clients":["10.0.1.0/25","10.0.1.128/25"],"servers":["10.1.0.16/28"],"ports":["2811","50000-51000"]}]}`)
	f.Add(`{"mark":1,"listen_port":9,"divert":[{"clients":["2001:db8:1::/48"],"servers":["2001:db8:2::/124"],"ports":["1-65535"]}]}`)
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseTproxyRules(s)
		if err != nil {
			return
		}
		c, err := r.Canonical()
		if err != nil {
			t.Fatalf("parsed %q but cannot encode: %v", s, err)
		}
		again, err := ParseTproxyRules(c)
		if err != nil {
			t.Fatalf("canonical %q does not parse: %v", c, err)
		}
		if c2, _ := again.Canonical(); c2 != c {
			t.Fatalf("canonical form not stable: %q then %q", c, c2)
		}
		if !strings.HasPrefix(c, "{") {
			t.Fatalf("odd canonical %q", c)
		}
	})
}

// Server prefixes and port ranges are kept as the fewest prefixes and
// merged ranges, the old one-server form reads as the new one, and two
// diverts to the same servers and ports merge their clients.
func TestTproxyRulesCanonicalRanges(t *testing.T) {
	a := TproxyRules{Mark: 1, ListenPort: 9, Divert: []Divert{
		{Clients: prefixes("10.0.1.0/25"), Servers: prefixes("10.1.0.16/29", "10.1.0.24/29"),
			Ports: []portrange.Range{{Lo: 50500, Hi: 51000}, {Lo: 50000, Hi: 50499}, {Lo: 2811, Hi: 2811}}},
		{Clients: prefixes("10.0.1.128/25"), Servers: prefixes("10.1.0.16/28"),
			Ports: []portrange.Range{{Lo: 2811, Hi: 2811}, {Lo: 50000, Hi: 51000}}},
		{Clients: prefixes("10.0.9.0/24"), Server: netip.MustParseAddr("10.1.0.1"), Port: 22},
	}}
	got, err := a.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"mark":1,"listen_port":9,"divert":[` +
		`{"clients":["10.0.9.0/24"],"servers":["10.1.0.1/32"],"ports":["22"]},` +
		`{"clients":["10.0.1.0/24"],"servers":["10.1.0.16/28"],"ports":["2811","50000-51000"]}]}`
	if got != want {
		t.Fatalf("Canonical =\n%s\nwant\n%s", got, want)
	}
	back, err := ParseTproxyRules(got)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := back.Canonical(); again != got {
		t.Fatalf("canonical value does not read back: %s", again)
	}
}

func TestTproxyRulesCanonicalIPv6(t *testing.T) {
	a := TproxyRules{Mark: 1, ListenPort: 9, Divert: []Divert{
		{Clients: prefixes("2001:db8:1::/49", "2001:db8:1:8000::/49"), Servers: prefixes("2001:db8:2::10/128"), Ports: []portrange.Range{{Lo: 5201, Hi: 5201}}},
		{Clients: prefixes("10.0.1.0/24"), Server: netip.MustParseAddr("10.1.0.1"), Port: 80},
	}}
	got, err := a.Canonical()
	const want = `{"mark":1,"listen_port":9,"divert":[` +
		`{"clients":["10.0.1.0/24"],"servers":["10.1.0.1/32"],"ports":["80"]},` +
		`{"clients":["2001:db8:1::/48"],"servers":["2001:db8:2::10/128"],"ports":["5201"]}]}`
	if err != nil || got != want {
		t.Fatalf("Canonical = %s, %v\nwant %s", got, err, want)
	}
}
