package desired

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/appliance/config"
	"github.com/sosappliance/sosappliance/host/item"
	"github.com/sosappliance/sosappliance/internal/portrange"
	"github.com/sosappliance/sosappliance/sdn/flows"
)

// gridftpConfig is two sites and a GridFTP whitelist: a server prefix, the
// control port and a data port range, carried in both directions.
const gridftpConfig = `
security { psk_file = "/etc/psk" }
controller { node = "ctl" }
site "a" {
  prefixes = ["10.1.0.0/24"]
  switch "sw-a" { datapath_id = "0x1" }
  agent "ag-a" {
    node = "na"
    switch = "sw-a"
    switch_port = 3
    mac = "02:00:00:00:00:01"
    address = "10.1.0.2"
    interface = "eth1"
  }
}
site "b" {
  prefixes = ["10.2.0.0/24"]
  switch "sw-b" {
    datapath_id = "0x2"
    port_masks  = false
  }
  agent "ag-b" {
    node = "nb"
    switch = "sw-b"
    switch_port = 7
    mac = "02:00:00:00:00:02"
    address = "10.2.0.2"
    interface = "eth1"
  }
}
whitelist "gridftp" {
  clients      = ["10.1.0.0/25"]
  servers      = ["10.2.0.16/28"]
  server_ports = ["2811", "50000-50019"]
  direction    = "both"
  streams      = 8
}
`

func parse(t *testing.T, src string) *config.Config {
	t.Helper()
	cfg, diags := config.Parse(config.Source{Filename: "test.hcl", Bytes: []byte(src)})
	if diags.HasErrors() {
		t.Fatalf("%v", diags)
	}
	return cfg
}

// TestCompileDirectionBoth: with direction = "both" each agent is the
// client side of the connections its own site opens and the server side of
// those the other site opens; routes, diverts and steering follow.
func TestCompileDirectionBoth(t *testing.T) {
	cfg := parse(t, gridftpConfig)
	clients, servers := []netip.Prefix{netip.MustParsePrefix("10.1.0.0/25")}, []netip.Prefix{netip.MustParsePrefix("10.2.0.16/28")}
	ports := []portrange.Range{{Lo: 2811, Hi: 2811}, {Lo: 50000, Hi: 50019}}
	for _, c := range []struct {
		node, agent, peer string
		opens, listens    []netip.Prefix // this site's hosts, the far site's
	}{
		{"na", "ag-a", "ag-b", clients, servers},
		{"nb", "ag-b", "ag-a", servers, clients},
	} {
		d, err := Compile(cfg, c.node)
		if err != nil {
			t.Fatal(err)
		}
		rc := d.Agents[0].Relay
		if len(rc.Client) != 1 || len(rc.Server) != 1 {
			t.Fatalf("%s: %d client and %d server routes, want one each", c.agent, len(rc.Client), len(rc.Server))
		}
		cr, sr := rc.Client[0], rc.Server[0]
		if !slices.Equal(cr.Clients, c.opens) || !slices.Equal(cr.Servers, c.listens) || !slices.Equal(cr.Ports, ports) || cr.PeerName != c.peer {
			t.Errorf("%s client route %+v", c.agent, cr)
		}
		if !slices.Equal(sr.Clients, c.listens) || !slices.Equal(sr.Servers, c.opens) || sr.PeerName != c.peer {
			t.Errorf("%s server route %+v", c.agent, sr)
		}
		// The relay finds each direction's route by the connection.
		far := c.listens[0].Addr().Next()
		near := c.opens[0].Addr().Next()
		if !cr.Matches(near, netip.AddrPortFrom(far, 50019)) || cr.Matches(near, netip.AddrPortFrom(far, 50020)) {
			t.Errorf("%s: client route does not match by port range", c.agent)
		}
		nft, _ := itemValue(d, item.KindSteering, item.SteeringKeyNftables)
		rules, err := item.ParseTproxyRules(nft)
		if err != nil || len(rules.Divert) != 1 || !slices.Equal(rules.Divert[0].Clients, c.opens) ||
			!slices.Equal(rules.Divert[0].Servers, c.listens) || !slices.Equal(rules.Divert[0].Ports, ports) {
			t.Errorf("%s diverts %s (%v)", c.agent, nft, err)
		}
		if err := func() error { rc.PSK = make([]byte, 32); return rc.Validate() }(); err != nil {
			t.Errorf("%s relay spec: %v", c.agent, err)
		}
	}

	d, err := Compile(cfg, "ctl")
	if err != nil {
		t.Fatal(err)
	}
	for _, sw := range d.Controller.Switches {
		fs, err := flows.Compile(sw)
		if err != nil {
			t.Fatal(err)
		}
		var text []string
		for _, f := range fs {
			text = append(text, f.MatchString()+" "+f.ActionsString())
		}
		all := strings.Join(text, "\n")
		switch sw.Name {
		case "sw-a": // masks: 2811 and 50000-50015, 50016-50019
			for _, want := range []string{
				"priority=2000,tcp,nw_src=10.1.0.0/25,nw_dst=10.2.0.16/28,tp_dst=0xc350/0xfff0 set_field:02:00:00:00:00:01->eth_dst,output:3",
				"priority=2001,tcp,nw_src=10.1.0.0/25,nw_dst=10.2.0.16/28,tp_src=0xc360/0xfffc set_field:02:00:00:00:00:01->eth_dst,output:3",
			} {
				if !strings.Contains(all, want) {
					t.Errorf("sw-a lacks %q:\n%s", want, all)
				}
			}
			if n := len(fs); n != 2+3+3 {
				// bypass, normal; the requests of the clients'
				// connections and the replies of the servers' (3
				// port matches each).
				t.Errorf("sw-a has %d flows:\n%s", n, all)
			}
		case "sw-b": // port_masks = false: one flow per port
			for _, want := range []string{
				"priority=2001,tcp,nw_src=10.2.0.16/28,nw_dst=10.1.0.0/25,tp_src=50007 set_field:02:00:00:00:00:02->eth_dst,output:7",
				"priority=2000,tcp,nw_src=10.2.0.16/28,nw_dst=10.1.0.0/25,tp_dst=50007 set_field:02:00:00:00:00:02->eth_dst,output:7",
			} {
				if !strings.Contains(all, want) {
					t.Errorf("sw-b lacks %q:\n%s", want, all)
				}
			}
			if strings.Contains(all, "/0xff") {
				t.Errorf("sw-b has masked ports:\n%s", all)
			}
		}
	}
}
