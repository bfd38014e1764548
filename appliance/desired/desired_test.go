package desired

import (
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/appliance/config"
	"github.com/sosappliance/sosappliance/dataplane/agentspec"
	"github.com/sosappliance/sosappliance/host/item"
	"github.com/sosappliance/sosappliance/internal/portrange"
	"github.com/sosappliance/sosappliance/sdn/flows"
)

func loadExample(t *testing.T) *config.Config {
	t.Helper()
	cfg, _, diags := config.LoadFile("../../sos.hcl.example")
	if diags.HasErrors() {
		t.Fatalf("example: %v", diags)
	}
	return cfg
}

func itemValue(d *Desired, kind, key string) (string, bool) {
	for _, it := range d.Items {
		if it.Kind == kind && it.Key == key {
			return it.Value, true
		}
	}
	return "", false
}

func TestCompileRoles(t *testing.T) {
	cfg := loadExample(t)
	tests := []struct {
		node  string
		roles []string
	}{
		{"ctl-clemson", []string{"controller", "tuning"}},
		{"agent-clemson", []string{"agent:agent-clemson"}},
		{"agent-utah", []string{"agent:agent-utah"}},
	}
	for _, tt := range tests {
		d, err := Compile(cfg, tt.node)
		if err != nil {
			t.Fatalf("%s: %v", tt.node, err)
		}
		if !reflect.DeepEqual(d.Roles, tt.roles) {
			t.Errorf("%s roles = %v, want %v", tt.node, d.Roles, tt.roles)
		}
	}
	_, err := Compile(cfg, "agent-clemsen")
	var unknown *UnknownNodeError
	if !errors.As(err, &unknown) || len(unknown.Known) != 3 {
		t.Fatalf("unknown node: %v", err)
	}
}

func TestCompileAgent(t *testing.T) {
	cfg := loadExample(t)
	d, err := Compile(cfg, "agent-clemson")
	if err != nil {
		t.Fatal(err)
	}
	if d.Controller != nil || len(d.Agents) != 1 {
		t.Fatalf("agent node got controller=%v agents=%d", d.Controller != nil, len(d.Agents))
	}
	a := d.Agents[0].Relay
	if len(a.Client) != 1 || a.Client[0].Name != "iperf-to-utah" || a.Client[0].PeerName != "agent-utah" ||
		a.Client[0].Peer.String() != "10.10.2.2:9877" || a.Client[0].Streams != 64 {
		t.Errorf("client routes: %+v", a.Client)
	}
	if len(a.Server) != 1 || a.Server[0].Name != "gridftp-from-utah" || a.Server[0].ChunkSize != 60000 ||
		a.Server[0].PeerName != "agent-utah" {
		t.Errorf("server routes: %+v", a.Server)
	}
	// Pinning travels in the relay spec only, not as a host item.
	if config.FormatCPUList(a.RelayCPUs) != "13" {
		t.Errorf("relay cpus %v", a.RelayCPUs)
	}
	if v, ok := itemValue(d, item.KindRelay, "cpus"); ok {
		t.Errorf("relay cpus are also a host item: %q", v)
	}
	for _, want := range []struct{ kind, key, value string }{
		{item.KindSysctl, "net.ipv4.tcp_rmem", "4096 87380 33554432"},
		{item.KindSysctl, "net.ipv4.tcp_congestion_control", "htcp"},
		{item.KindSysctl, "net.ipv4.conf.eth1.rp_filter", "2"},
		{item.KindInterface, "eth1/mtu", "9000"},
		{item.KindInterface, "eth1/txqueuelen", "10000"},
		{item.KindIRQ, "eth1", "0-12"},
	} {
		if got, ok := itemValue(d, want.kind, want.key); !ok || got != want.value {
			t.Errorf("%s/%s = %q (present %v), want %q", want.kind, want.key, got, ok, want.value)
		}
	}
	nft, ok := itemValue(d, item.KindSteering, item.SteeringKeyNftables)
	rules, err := item.ParseTproxyRules(nft)
	if !ok || err != nil || rules.ListenPort != 9876 || rules.Interface != "eth1" || len(rules.Divert) != 1 ||
		!slices.Equal(rules.Divert[0].Servers, []netip.Prefix{netip.MustParsePrefix("10.10.2.1/32")}) ||
		!slices.Equal(rules.Divert[0].Ports, []portrange.Range{portrange.Single(5201)}) {
		t.Errorf("steering table = %q (%v)", nft, err)
	}
	for _, key := range []string{item.SteeringKeyRule, item.SteeringKeyRoute} {
		if _, ok := itemValue(d, item.KindSteering, key); !ok {
			t.Errorf("steering %s missing", key)
		}
	}
	for i := 1; i < len(d.Items); i++ {
		p, q := d.Items[i-1], d.Items[i]
		if p.Kind > q.Kind || p.Kind == q.Kind && p.Key >= q.Key {
			t.Errorf("items not sorted and unique: %v before %v", p, q)
		}
	}
}

// TestCompileRelaySpec: the relay spec is complete and valid once the
// shell joins the PSK; the limits the file leaves out take the one set of
// defaults.
func TestCompileRelaySpec(t *testing.T) {
	d, err := Compile(loadExample(t), "agent-clemson")
	if err != nil {
		t.Fatal(err)
	}
	rc := d.Agents[0].Relay
	if rc.Name != "agent-clemson" || rc.PSKFile != "/etc/sosappliance/psk" || rc.PSK != nil ||
		rc.Encryption != agentspec.EncryptionAESGCM || rc.TransparentListen.String() != "0.0.0.0:9876" ||
		rc.DataListen.String() != "10.10.1.2:9877" || rc.HealthListen.String() != "10.10.1.2:9878" {
		t.Errorf("relay spec %+v", rc)
	}
	if !slices.Equal(rc.HealthAllow, []netip.Prefix{netip.MustParsePrefix("10.10.0.1/32")}) {
		t.Errorf("health allow list %v, want the example's 10.10.0.1/32", rc.HealthAllow)
	}
	want := agentspec.Limits{
		MaxSessions: 256, SessionMemory: 1 << 30, Memory: 8 << 30, MaxPreAuthPerSource: 128, MaxHalfOpenPerSource: 64,
	}.WithDefaults()
	if rc.Limits != want {
		t.Errorf("limits %+v, want %+v", rc.Limits, want)
	}
	rc.PSK = make([]byte, 32)
	if err := rc.Validate(); err != nil {
		t.Errorf("compiled spec does not validate: %v", err)
	}
}

// TestCompileSwitchConnect: a switch the controller dials carries its
// target in the switch spec itself.
func TestCompileSwitchConnect(t *testing.T) {
	src := `
controller { node = "ctl" }
security { psk_file = "/etc/psk" }
site "a" {
  prefixes = ["10.1.0.0/24"]
  switch "dialed" {
    datapath_id = "00:00:00:00:00:00:00:01"
    connect     = "tcp:192.0.2.1:6653"
  }
  switch "dialing" { datapath_id = "00:00:00:00:00:00:00:02" }
}
`
	cfg, diags := config.Parse(config.Source{Filename: "t.hcl", Bytes: []byte(src)})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	d, err := Compile(cfg, "ctl")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, sw := range d.Controller.Switches {
		got[sw.Name] = sw.Connect
	}
	if !reflect.DeepEqual(got, map[string]string{"dialed": "tcp:192.0.2.1:6653", "dialing": ""}) {
		t.Errorf("connect targets %v", got)
	}
}

func TestCompileController(t *testing.T) {
	cfg := loadExample(t)
	d, err := Compile(cfg, "ctl-clemson")
	if err != nil {
		t.Fatal(err)
	}
	if d.Controller == nil || len(d.Controller.Switches) != 2 {
		t.Fatalf("controller: %+v", d.Controller)
	}
	if v, _ := itemValue(d, item.KindSysctl, "net.core.somaxconn"); v != "4096" {
		t.Errorf("node tuning not applied: %v", d.Items)
	}
	cl := d.Controller.Switches[0]
	if cl.Name != "s4810-clemson" || cl.DatapathID != 1 || len(cl.Agents) != 1 || cl.Agents[0].Port != 3 {
		t.Fatalf("clemson switch: %+v", cl)
	}
	want := []struct {
		wl   string
		side flows.Side
	}{{"gridftp-from-utah", flows.ServerSide}, {"iperf-to-utah", flows.ClientSide}}
	if len(cl.Steers) != len(want) {
		t.Fatalf("clemson steers: %+v", cl.Steers)
	}
	for i, w := range want {
		s := cl.Steers[i]
		if s.Whitelist != w.wl || s.Side != w.side || s.Agent.Name != "agent-clemson" ||
			!reflect.DeepEqual(s.DependsOn, []string{"agent-clemson", "agent-utah"}) {
			t.Errorf("steer %d = %+v", i, s)
		}
	}
	if h := d.Controller.Health["agent-utah"]; h.HTTP != "10.10.2.2:9878" || h.Data.String() != "10.10.2.2:9877" || h.MaxSessions != config.DefaultMaxSessions {
		t.Errorf("health target %+v", h)
	}
}

func TestCompileIsDeterministic(t *testing.T) {
	cfg := loadExample(t)
	for _, node := range Nodes(cfg) {
		a, err1 := Compile(cfg, node)
		b, err2 := Compile(cfg, node)
		if err1 != nil || err2 != nil || !reflect.DeepEqual(a, b) {
			t.Fatalf("%s: compile differs between runs", node)
		}
	}
}

func TestConflictingProfiles(t *testing.T) {
	src := `
security { psk_file = "/etc/psk" }
site "a" {
  prefixes = ["10.1.0.0/24"]
}
tuning "x" { sysctl = { "net.core.rmem_max" = "1" } }
tuning "y" { sysctl = { "net.core.rmem_max" = "2" } }
node "n" { tuning = ["x", "y"] }
`
	cfg, diags := config.Parse(config.Source{Filename: "t.hcl", Bytes: []byte(src)})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	if _, err := Compile(cfg, "n"); err == nil {
		t.Fatal("conflicting profiles compiled")
	}
}

// TestCompileControllerAccess: the controller role carries the TLS files
// as paths (desired reads no file) and each switch its tls and allow list.
func TestCompileControllerAccess(t *testing.T) {
	d, err := Compile(loadExample(t), "ctl-clemson")
	if err != nil {
		t.Fatal(err)
	}
	want := &TLSFiles{CertFile: "/etc/sosappliance/controller-cert.pem", KeyFile: "/etc/sosappliance/controller-privkey.pem",
		CAFile: "/etc/sosappliance/switchca-cacert.pem"}
	if !reflect.DeepEqual(d.Controller.TLS, want) {
		t.Errorf("tls = %+v, want %+v", d.Controller.TLS, want)
	}
	for _, sw := range d.Controller.Switches {
		if !sw.TLS || len(sw.Allow) != 1 || sw.TLSName != sw.Name {
			t.Errorf("switch %s: tls %v allow %v tls_name %q", sw.Name, sw.TLS, sw.Allow, sw.TLSName)
		}
	}
}

// Items built from a tuning block with a base carry their origin, the
// profile's fq is optional and the file's values are not, and the
// profile's notes reach the node once.
func TestCompileTuningProfileOrigins(t *testing.T) {
	const file = "../../examples/fasterdata.hcl"
	cfg, _, diags := config.LoadFile(file)
	if diags.HasErrors() {
		t.Fatalf("%s: %v", file, diags)
	}
	tests := []struct {
		node, kind, key, value, origin string
		optional                       bool
	}{
		{"dtn-east", item.KindSysctl, "net.core.default_qdisc", "fq", "profile fasterdata-100g (" + file + ":60)", true},
		{"dtn-east", item.KindSysctl, "net.core.rmem_max", "2147483647", "profile fasterdata-100g (" + file + ":60)", false},
		{"dtn-east", item.KindSysctl, "net.ipv4.tcp_rmem", "4096 87380 1073741824", "profile fasterdata-100g (" + file + ":60)", false},
		{"dtn-east", item.KindInterface, "ens1f0/mtu", "9000", "profile fasterdata-100g (" + file + ":60)", false},
		{"dtn-east", item.KindInterface, "ens1f0/txqueuelen", "10000", "profile fasterdata-100g (" + file + ":60)", false},
		{"dtn-east", item.KindIRQ, "ens1f0", "0-7", file + ":65", false},
		{"dtn-east", item.KindSteering, item.SteeringKeyNftables, "", "agent dtn-east (" + file + ":20)", false},
		{"dtn-west", item.KindSysctl, "net.core.default_qdisc", "fq", "profile fasterdata-10g (" + file + ":71)", true},
		{"dtn-west", item.KindSysctl, "net.core.rmem_max", "268435456", file + ":77", false},
		{"dtn-west", item.KindSysctl, "net.ipv4.tcp_rmem", "4096 87380 134217728", file + ":79", false},
		{"dtn-west", item.KindSysctl, "net.ipv4.tcp_no_metrics_save", "1", "profile fasterdata-10g (" + file + ":71)", false},
		{"dtn-west", item.KindSysctl, "net.ipv4.tcp_mtu_probing", "1", "profile fasterdata-10g (" + file + ":71)", false},
		{"dtn-west", item.KindInterface, "eth1/mtu", "1500", file + ":83", false},
		{"dtn-west", item.KindInterface, "eth1/txqueuelen", "10000", "profile fasterdata-10g (" + file + ":71)", false},
	}
	compiled := map[string]*Desired{}
	for _, tt := range tests {
		d := compiled[tt.node]
		if d == nil {
			var err error
			if d, err = Compile(cfg, tt.node); err != nil {
				t.Fatal(err)
			}
			compiled[tt.node] = d
		}
		var got *item.Item
		for i := range d.Items {
			if d.Items[i].Kind == tt.kind && d.Items[i].Key == tt.key {
				got = &d.Items[i]
			}
		}
		switch {
		case got == nil:
			t.Errorf("%s: no %s/%s", tt.node, tt.kind, tt.key)
		case tt.value != "" && got.Value != tt.value || got.Origin != tt.origin || got.Optional != tt.optional:
			t.Errorf("%s: %s = %q from %q (optional %v), want %q from %q (optional %v)",
				tt.node, got.ID(), got.Value, got.Origin, got.Optional, tt.value, tt.origin, tt.optional)
		}
	}
	east := compiled["dtn-east"]
	if east.Agents[0].Relay.Congestion != "htcp" {
		t.Errorf("congestion %q", east.Agents[0].Relay.Congestion)
	}
	if len(east.Notes) != 4 || !strings.HasPrefix(east.Notes[0], "fasterdata-100g: Interrupt Binding") {
		t.Errorf("notes = %q", east.Notes)
	}
	for _, it := range compiled["dtn-west"].Items {
		if it.Kind == item.KindSysctl && it.Key == "net.core.wmem_max" && it.Origin != file+":78" {
			t.Errorf("wmem_max from %q", it.Origin)
		}
	}
}
