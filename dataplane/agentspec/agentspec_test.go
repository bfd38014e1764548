package agentspec

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/portrange"
)

func TestRouteMatches(t *testing.T) {
	one := Route{Clients: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/24")}, Server: netip.MustParseAddr("10.2.0.1"), Port: 5201}
	ranges := Route{Clients: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/24")},
		Servers: []netip.Prefix{netip.MustParsePrefix("10.2.0.16/28")},
		Ports:   []portrange.Range{{Lo: 2811, Hi: 2811}, {Lo: 50000, Hi: 51000}}}
	cases := []struct {
		r      Route
		client string
		server string
		want   bool
	}{
		{one, "10.1.0.7", "10.2.0.1:5201", true},
		{one, "::ffff:10.1.0.7", "[::ffff:10.2.0.1]:5201", true},
		{one, "10.1.0.7", "10.2.0.1:5202", false},
		{one, "10.1.1.7", "10.2.0.1:5201", false},
		{ranges, "10.1.0.7", "10.2.0.20:50500", true},
		{ranges, "10.1.0.7", "10.2.0.31:51000", true},
		{ranges, "10.1.0.7", "10.2.0.20:2811", true},
		{ranges, "10.1.0.7", "10.2.0.20:51001", false},
		{ranges, "10.1.0.7", "10.2.0.32:50500", false},
		{ranges, "10.9.0.7", "10.2.0.20:50500", false},
	}
	for _, c := range cases {
		if got := c.r.Matches(netip.MustParseAddr(c.client), netip.MustParseAddrPort(c.server)); got != c.want {
			t.Errorf("%v ports %v: %s -> %s = %v, want %v", c.r.Servers, c.r.Ports, c.client, c.server, got, c.want)
		}
	}
}

func TestValidateRoutes(t *testing.T) {
	base := Relay{Name: "a", PSK: make([]byte, 32), DataListen: netip.MustParseAddrPort("10.2.0.2:9877")}
	good := Route{Name: "r", PeerName: "b", Clients: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/24")},
		Servers: []netip.Prefix{netip.MustParsePrefix("10.2.0.16/28")}, Ports: []portrange.Range{{Lo: 50000, Hi: 51000}},
		Streams: 4, ChunkSize: 60000}
	r := base
	r.Server = []Route{good}
	if err := r.Validate(); err != nil {
		t.Fatalf("valid ranges refused: %v", err)
	}
	bad := good
	bad.Ports = []portrange.Range{{Lo: 9, Hi: 3}}
	bad.Servers = []netip.Prefix{netip.MustParsePrefix("fd00::/64")}
	r.Server = []Route{bad}
	err := r.Validate()
	for _, want := range []string{"empty port range 9-3", "differ in address family"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate = %v, want %q", err, want)
		}
	}
	none := good
	none.Servers, none.Ports = nil, nil
	r.Server = []Route{none}
	if err := r.Validate(); err == nil || !strings.Contains(err.Error(), "no server address") || !strings.Contains(err.Error(), "no server port") {
		t.Errorf("a route without server and port: %v", err)
	}
}

func TestValidatePool(t *testing.T) {
	base := Relay{Name: "a", PSK: make([]byte, 32), TransparentListen: netip.MustParseAddrPort("10.1.0.2:9876")}
	good := Route{Name: "r", PeerName: "b", Clients: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/24")},
		Server: netip.MustParseAddr("10.2.0.16"), Port: 80, Streams: 4, ChunkSize: 60000,
		Peer: netip.MustParseAddrPort("10.2.0.2:9877"), Pool: Pool{MinIdle: 8, Max: 16, IdleTimeout: time.Minute}}
	r := base
	r.Client = []Route{good}
	if err := r.Validate(); err != nil {
		t.Fatalf("valid pool refused: %v", err)
	}
	for want, pool := range map[string]Pool{
		"none may be negative":      {MinIdle: -1},
		"below min_idle":            {MinIdle: 8, Max: 4},
		"above the bound of 1024":   {MinIdle: 2000},
		"on a server-side entry (p": {MinIdle: 1},
	} {
		bad := good
		bad.Pool = pool
		r := base
		r.Client = []Route{bad}
		if strings.HasPrefix(want, "on a server") {
			r.DataListen = netip.MustParseAddrPort("10.2.0.2:9877")
			r.Client, r.Server = nil, []Route{bad}
		}
		if err := r.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("pool %+v: %v, want %q", pool, err, want)
		}
	}
	if p := (Pool{MinIdle: 4}).WithDefaults(); p.Max != 4 || p.IdleTimeout != DefaultPoolIdleTimeout {
		t.Errorf("defaults: %+v", p)
	}
	if l := (Limits{}).WithDefaults(); l.MaxPooledPerPeer != DefaultMaxPooledPerPeer {
		t.Errorf("MaxPooledPerPeer default %d", l.MaxPooledPerPeer)
	}
}
