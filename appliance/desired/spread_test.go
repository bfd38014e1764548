package desired

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/appliance/config"
	"github.com/sosappliance/sosappliance/sdn/flows"
	"github.com/sosappliance/sosappliance/sdn/ofp13"
	"github.com/sosappliance/sosappliance/sdn/spread"
)

// packet is the part of a TCP/IPv4 packet steering matches.
type packet struct {
	src, dst netip.AddrPort
}

func (p packet) field(f ofp13.OXMField) []byte {
	switch f {
	case ofp13.FieldEthType:
		return binary.BigEndian.AppendUint16(nil, 0x0800)
	case ofp13.FieldIPProto:
		return []byte{6}
	case ofp13.FieldIPv4Src:
		a := p.src.Addr().As4()
		return a[:]
	case ofp13.FieldIPv4Dst:
		a := p.dst.Addr().As4()
		return a[:]
	case ofp13.FieldTCPSrc:
		return binary.BigEndian.AppendUint16(nil, p.src.Port())
	case ofp13.FieldTCPDst:
		return binary.BigEndian.AppendUint16(nil, p.dst.Port())
	}
	return nil
}

// steeredTo evaluates a switch's flow table for a packet from a host port:
// the agent port of the highest-priority steering flow that matches, or 0
// for normal forwarding.
func steeredTo(fs []flows.Flow, p packet) uint32 {
	for _, f := range fs { // sorted, highest priority first
		hit := true
		for _, o := range f.Match.Fields {
			v := p.field(o.Field)
			if o.IsBasic(ofp13.FieldInPort) || v == nil {
				hit = false
				break
			}
			for i := range v {
				m := byte(0xff)
				if o.Mask != nil {
					m = o.Mask[i]
				}
				if v[i]&m != o.Value[i]&m {
					hit = false
				}
			}
		}
		if !hit {
			continue
		}
		for _, in := range f.Instructions {
			if aa, ok := in.(*ofp13.ApplyActions); ok {
				for _, a := range aa.Actions {
					if out, ok := a.(*ofp13.ActionOutput); ok && out.Port != ofp13.PortNormal {
						return out.Port
					}
				}
			}
		}
		return 0
	}
	return 0
}

// For random connections and random agents down: the client site's
// switch steers the request to exactly one live agent of its site, the
// server site's switch steers the reply to exactly one live agent of its
// site, and that agent is the one the client-side agent's relay spec
// dials (package spread on the route's Peers, with the same agents down).
// Only when every agent of a site is down does the whitelist fail open.
func TestClientAndServerSitesAgreeOnTheFarAgent(t *testing.T) {
	for _, mode := range []string{"port", "address"} {
		src, err := readExample(t)
		if err != nil {
			t.Fatal(err)
		}
		src = strings.Replace(src, `mode = "port"`, `mode = "`+mode+`"`, 1)
		cfg, diags := config.Parse(config.Source{Filename: "two-agents.hcl", Bytes: []byte(src)})
		if diags.HasErrors() {
			t.Fatal(diags)
		}
		ctl, err := Compile(cfg, "ctl")
		if err != nil {
			t.Fatal(err)
		}
		sw := map[string]flows.Switch{}
		for _, s := range ctl.Controller.Switches {
			sw[s.Name] = s
		}
		portOf := map[string]uint32{}
		for _, s := range cfg.Sites {
			for _, a := range s.Agents {
				portOf[a.Name] = a.SwitchPort
			}
		}
		east1, err := Compile(cfg, "east-1")
		if err != nil {
			t.Fatal(err)
		}
		route := east1.Agents[0].Relay.Client[0]
		if route.Name != "bulk" || len(route.Peers) != 2 {
			t.Fatalf("east-1's route: %+v", route)
		}
		server := netip.AddrPortFrom(netip.MustParseAddr("192.0.2.200"), 5202)
		r := rand.New(rand.NewPCG(3, 4))
		agents := []string{"east-1", "east-2", "west-1", "west-2"}
		for range 2000 {
			down := map[string]bool{}
			for _, a := range agents {
				down[a] = r.IntN(3) == 0
			}
			isDown := func(a string) bool { return down[a] }
			client := netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 0, 2, byte(10 + r.IntN(54))}), uint16(1024+r.IntN(64000)))
			east, _ := flows.FailOpen(sw["sw-east"], isDown)
			west, withdrawn := flows.FailOpen(sw["sw-west"], isDown)
			ef, err := flows.Compile(east)
			if err != nil {
				t.Fatal(err)
			}
			wf, err := flows.Compile(west)
			if err != nil {
				t.Fatal(err)
			}
			req := steeredTo(ef, packet{client, server})
			rep := steeredTo(wf, packet{server, client})
			siteDown := down["east-1"] && down["east-2"] || down["west-1"] && down["west-2"]
			if siteDown {
				if req != 0 || rep != 0 || !slices.Contains(withdrawn, "bulk") {
					t.Fatalf("%s %v: a site without agents, yet steered to ports %d/%d (withdrawn %v)", mode, down, req, rep, withdrawn)
				}
				continue
			}
			if req == 0 || rep == 0 {
				t.Fatalf("%s %v %s: not steered (%d, %d)", mode, down, client, req, rep)
			}
			if name := []string{"", "east-1", "east-2"}[req]; down[name] {
				t.Fatalf("%s %v %s: request steered to dead agent %s", mode, down, client, name)
			}
			up := []bool{!down["west-1"], !down["west-2"]}
			b, err := spread.Assign(spread.Mode(route.Spread), route.SpreadBits, 2, up)
			if err != nil {
				t.Fatal(err)
			}
			far := route.Peers[b.Agent(client)].Name
			if down[far] || portOf[far] != rep {
				t.Fatalf("%s %v %s: the relay dials %s, the server site steers replies to port %d", mode, down, client, far, rep)
			}
		}
	}
}

// The relay specs of a two-agent site: the client side knows every far
// agent in order with the spread, the server side admits every client
// agent.
func TestRelaySpecsOfTwoAgentSites(t *testing.T) {
	cfg, _, diags := config.LoadFile("../../examples/two-agents.hcl")
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	d, err := Compile(cfg, "west-2")
	if err != nil {
		t.Fatal(err)
	}
	rc := d.Agents[0].Relay
	if len(rc.Server) != 1 || rc.Server[0].Name != "bulk" || !slices.Equal(rc.Server[0].PeerNames, []string{"east-1", "east-2"}) {
		t.Errorf("west-2 server routes: %+v", rc.Server)
	}
	d, err = Compile(cfg, "east-2")
	if err != nil {
		t.Fatal(err)
	}
	rc = d.Agents[0].Relay
	if len(rc.Client) != 2 {
		t.Fatalf("east-2 client routes: %+v", rc.Client)
	}
	bulk, pinned := rc.Client[0], rc.Client[1]
	if len(bulk.Peers) != 2 || bulk.Peers[1].Name != "west-2" || bulk.Spread != "port" || bulk.SpreadBits != 4 {
		t.Errorf("bulk: %+v", bulk)
	}
	if len(pinned.Peers) != 0 || pinned.PeerName != "west-1" {
		t.Errorf("pinned: %+v", pinned)
	}
	if err := rc.Validate(); err == nil || !strings.Contains(err.Error(), "pre-shared key") {
		t.Errorf("validate: %v", err)
	}
}

func readExample(t *testing.T) (string, error) {
	t.Helper()
	src, diags := config.ReadFile("../../examples/two-agents.hcl")
	if diags.HasErrors() {
		return "", diags
	}
	return string(src.Bytes), nil
}

// With direction = "both", connections the servers open are spread the
// same way with the roles swapped: the server site's switch spreads them
// by the server's port over its agents, the client site's switch the
// replies, and the server-site agents dial the client-site agent of the
// bucket.
func TestSpreadBothDirections(t *testing.T) {
	src, err := readExample(t)
	if err != nil {
		t.Fatal(err)
	}
	src = strings.Replace(src, `server_ports = ["5201-5204"]`, `server_ports = ["5201-5204"]
  direction    = "both"`, 1)
	cfg, diags := config.Parse(config.Source{Filename: "two-agents.hcl", Bytes: []byte(src)})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	ctl, err := Compile(cfg, "ctl")
	if err != nil {
		t.Fatal(err)
	}
	reverse := 0
	for _, sw := range ctl.Controller.Switches {
		for _, st := range sw.Steers {
			if st.Whitelist == "bulk" && st.Reverse {
				reverse++
				if len(st.Agents) != 2 || st.Agents[0].Name[:4] != sw.Name[3:7] {
					t.Errorf("%s reverse %s steer spreads over %+v", sw.Name, st.Side, st.Agents)
				}
			}
		}
	}
	if reverse != 2 {
		t.Errorf("%d reverse steers, want one per switch", reverse)
	}
	d, err := Compile(cfg, "west-1")
	if err != nil {
		t.Fatal(err)
	}
	var peers []string
	for _, r := range d.Agents[0].Relay.Client {
		for _, p := range r.Peers {
			peers = append(peers, p.Name)
		}
	}
	if !slices.Equal(peers, []string{"east-1", "east-2"}) {
		t.Errorf("west-1's reverse route dials %v", peers)
	}
}
