package config

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"

	"github.com/sosappliance/sosappliance/internal/portrange"
)

var errorMarker = regexp.MustCompile(`# ERROR: `)

// TestErrorCorpus checks that every diagnostic of each bad file lands on a
// line marked "# ERROR: <summary>", and every marker is matched by one.
func TestErrorCorpus(t *testing.T) {
	files, err := filepath.Glob("testdata/errors/*.hcl")
	if err != nil || len(files) == 0 {
		t.Fatalf("no error corpus: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			src, diags := ReadFile(f)
			if diags.HasErrors() {
				t.Fatalf("read: %v", diags)
			}
			want := markers(t, src.Bytes)
			cfg, diags := Parse(src)
			if cfg != nil || !diags.HasErrors() {
				t.Fatalf("bad file decoded without errors")
			}
			matched := map[string]bool{}
			for _, d := range diags {
				if d.Subject == nil {
					t.Errorf("diagnostic without position: %s", d.Summary)
					continue
				}
				if d.Subject.Filename != f {
					t.Errorf("diagnostic %q names file %q, want %q", d.Summary, d.Subject.Filename, f)
				}
				line := d.Subject.Start.Line
				found := false
				for i, m := range want[line] {
					if strings.Contains(d.Summary, m) || strings.Contains(d.Detail, m) {
						matched[fmt.Sprintf("%d/%d", line, i)] = true
						found = true
					}
				}
				if !found {
					t.Errorf("unexpected diagnostic at line %d: %s (%s)", line, d.Summary, d.Detail)
				}
				if d.Detail == "" {
					t.Errorf("line %d: diagnostic %q has no fix hint", line, d.Summary)
				}
			}
			for line, ms := range want {
				for i, m := range ms {
					if !matched[fmt.Sprintf("%d/%d", line, i)] {
						t.Errorf("line %d: expected diagnostic %q, got none", line, m)
					}
				}
			}
		})
	}
}

func markers(t *testing.T, src []byte) map[int][]string {
	t.Helper()
	out := map[int][]string{}
	for i, line := range strings.Split(string(src), "\n") {
		parts := errorMarker.Split(line, -1)
		for _, p := range parts[1:] {
			out[i+1] = append(out[i+1], strings.TrimSpace(p))
		}
	}
	if len(out) == 0 {
		t.Fatalf("file has no # ERROR: markers")
	}
	return out
}

func parseString(t *testing.T, src string) (*Config, hcl.Diagnostics) {
	t.Helper()
	return Parse(Source{Filename: "test.hcl", Bytes: []byte(src)})
}

func mustParse(t *testing.T, src string) *Config {
	t.Helper()
	cfg, diags := parseString(t, src)
	if diags.HasErrors() {
		var b bytes.Buffer
		WriteDiagnostics(&b, diags, []byte(src))
		t.Fatalf("unexpected diagnostics:\n%s", b.String())
	}
	return cfg
}

var newWhitelistForm = regexp.MustCompile(`(?m)^\s*(servers|server_ports|direction)\s*=`)

func TestExampleFiles(t *testing.T) {
	files := []string{"../../sos.hcl.example"}
	err := filepath.WalkDir("../../examples", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".hcl") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 3 {
		t.Fatalf("expected the example, minimal and lab configs, found %v", files)
	}
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			cfg, src, diags := LoadFile(f)
			if diags.HasErrors() {
				var b bytes.Buffer
				WriteDiagnostics(&b, diags, src.Bytes)
				t.Fatalf("%s", b.String())
			}
			if len(cfg.Sites) < 2 || len(cfg.Whitelists) == 0 {
				t.Fatalf("%s: want at least two sites and a whitelist", f)
			}
			// Examples show the whitelist forms real applications need:
			// server prefixes, port lists and ranges, both directions.
			if !newWhitelistForm.Match(src.Bytes) {
				t.Errorf("%s uses none of servers, server_ports, direction", f)
			}
			for _, w := range cfg.Whitelists {
				if w.ClientAgent == "" || w.ServerAgent == "" {
					t.Errorf("%s: whitelist %q did not resolve its agents", f, w.Name)
				}
			}
		})
	}
}

func TestValidConfigs(t *testing.T) {
	base := func(extra string) string {
		return `
security { psk_file = "/etc/psk" }
controller { node = "ctl" }
site "a" {
  prefixes = ["10.1.0.0/24", "10.3.0.0/24"]
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
  switch "sw-b" { datapath_id = "00:00:00:00:00:00:00:02" }
  agent "ag-b" {
    node = "nb"
    switch = "sw-b"
    switch_port = 7
    mac = "02:00:00:00:00:02"
    address = "10.2.0.2"
    interface = "eth1"
  }
}
` + extra
	}
	tests := []struct {
		name  string
		extra string
		check func(t *testing.T, c *Config)
	}{
		{"defaults", `whitelist "w" {
  clients = ["10.1.0.0/24"]
  server = "10.2.0.10"
  server_port = 5201
}`, func(t *testing.T, c *Config) {
			w := c.Whitelists[0]
			if w.Streams != DefaultStreams || w.ChunkSize != DefaultChunkSize || w.QueueLength != DefaultQueueLength {
				t.Errorf("defaults not applied: %+v", w)
			}
			if w.ClientSite != "a" || w.ServerSite != "b" || w.ClientAgent != "ag-a" || w.ServerAgent != "ag-b" {
				t.Errorf("resolution: %+v", w)
			}
			if c.Security.Encryption != EncryptionAESGCM {
				t.Errorf("encryption default %q", c.Security.Encryption)
			}
			if c.Controller.Listen != DefaultListen || c.Daemon.StatePath != DefaultStatePath {
				t.Errorf("controller/daemon defaults: %+v %+v", c.Controller, c.Daemon)
			}
			a := c.Agent("ag-a")
			if a.DataPort != DefaultDataPort || a.HealthListen != "10.1.0.2:9878" {
				t.Errorf("agent defaults: %+v", a)
			}
			if c.Switch("sw-a").DatapathID != 1 || c.Switch("sw-b").DatapathID != 2 {
				t.Errorf("datapath ids")
			}
		}},
		{"byte sizes and clients in two prefixes of one site", `whitelist "w" {
  clients = ["10.1.0.0/25", "10.3.0.0/24"]
  server = "10.2.0.10"
  server_port = 5201
  chunk_size = "64KiB"
  streams = 8
}
limits { session_memory = "10MB" }`, func(t *testing.T, c *Config) {
			if c.Whitelists[0].ChunkSize != 65536 || c.Limits.SessionMemory != 10_000_000 {
				t.Errorf("sizes: %d %d", c.Whitelists[0].ChunkSize, c.Limits.SessionMemory)
			}
		}},
		{"server prefixes, port ranges and direction both", `whitelist "gridftp" {
  clients      = ["10.1.0.0/25"]
  servers      = ["10.2.0.16/28", "10.2.0.40"]
  server_ports = ["2811", 50000, "50001-51000", "2812"]
  direction    = "both"
}
whitelist "disjoint-ports" {
  clients      = ["10.1.0.0/25"]
  servers      = ["10.2.0.16/28"]
  server_ports = ["51001-52000"]
}
whitelist "every-port" {
  clients = ["10.3.0.0/24"]
  servers = ["10.2.0.128/25"]
}`, func(t *testing.T, c *Config) {
			w := c.Whitelists[0]
			wantServers := []netip.Prefix{netip.MustParsePrefix("10.2.0.16/28"), netip.MustParsePrefix("10.2.0.40/32")}
			wantPorts := []portrange.Range{{Lo: 2811, Hi: 2812}, {Lo: 50000, Hi: 51000}}
			if !slices.Equal(w.Servers, wantServers) || !slices.Equal(w.Ports, wantPorts) || !w.Both() || w.AllPorts {
				t.Errorf("gridftp: servers %v ports %v direction %q", w.Servers, w.Ports, w.Direction)
			}
			if w.Server.IsValid() || w.ServerPort != 0 {
				t.Errorf("gridftp names several servers and ports, but Server %v ServerPort %d", w.Server, w.ServerPort)
			}
			// 1 client x 2 servers x (2 + 9 value/mask pairs); one port
			// per flow on a switch without masks.
			if n, m := w.FlowCount(true), w.FlowCount(false); n != 22 || m != 2*(2+1001) {
				t.Errorf("gridftp flow counts %d (masks) %d (no masks)", n, m)
			}
			e := c.Whitelists[2]
			if !e.AllPorts || !slices.Equal(e.Ports, []portrange.Range{portrange.All}) || e.Direction != DirectionClient {
				t.Errorf("every-port: %v %v %q", e.AllPorts, e.Ports, e.Direction)
			}
			if !c.Switch("sw-a").PortMasks {
				t.Errorf("port_masks defaults to true")
			}
		}},
		{"same server different ports do not overlap", `whitelist "w1" {
  clients = ["10.1.0.0/24"]
  server = "10.2.0.10"
  server_port = 5201
}
whitelist "w2" {
  clients = ["10.1.0.0/24"]
  server = "10.2.0.10"
  server_port = 5202
}`, func(t *testing.T, c *Config) {
			if len(c.Whitelists) != 2 {
				t.Errorf("got %d whitelists", len(c.Whitelists))
			}
		}},
		{"tuning profile", `tuning "t" {
  sysctl = {
    "net.ipv4.tcp_rmem" = "4096   87380 67108864"
    "net.ipv4.tcp_mtu_probing" = 1
  }
  interface "eth1" {
    mtu = 9000
    irq_cpus = "0-3,8"
  }
  relay_cpus = "13"
  congestion_control = "htcp"
  socket_buffer = "32MiB"
}
node "ctl" { tuning = ["t"] }`, func(t *testing.T, c *Config) {
			tu := c.Tuning("t")
			if tu.Sysctl["net.ipv4.tcp_rmem"] != "4096 87380 67108864" || tu.Sysctl["net.ipv4.tcp_mtu_probing"] != "1" {
				t.Errorf("sysctl: %v", tu.Sysctl)
			}
			if got := FormatCPUList(tu.Interfaces[0].IRQCPUs); got != "0-3,8" {
				t.Errorf("irq cpus %q", got)
			}
			if tu.Interfaces[0].TxQueueLen != -1 || tu.Interfaces[0].MTU != 9000 {
				t.Errorf("interface: %+v", tu.Interfaces[0])
			}
			if tu.SocketBuffer != 32<<20 || tu.CongestionControl != "htcp" {
				t.Errorf("socket tuning: %+v", tu)
			}
		}},
		{"base profile: its values where the file is silent, the file's where it speaks", `tuning "dtn" {
  base = "fasterdata-40g"
  sysctl = {
    "net.core.rmem_max" = "536870912"
  }
  interface "eth1" {
    irq_cpus = "0-3"
  }
  interface "eth2" {
    mtu = 1500
    txqueuelen = 1000
  }
}
node "ctl" { tuning = ["dtn"] }`, func(t *testing.T, c *Config) {
			tu := c.Tuning("dtn")
			if tu.Base != "fasterdata-40g" || tu.BaseRange.Start.Line != 29 {
				t.Errorf("base %q at %v", tu.Base, tu.BaseRange)
			}
			tests := []struct {
				key, value, origin string
				optional           bool
			}{
				{"net.core.rmem_max", "536870912", "test.hcl:31", false},
				{"net.core.wmem_max", "2147483647", "profile fasterdata-40g (test.hcl:29)", false},
				{"net.core.default_qdisc", "fq", "profile fasterdata-40g (test.hcl:29)", true},
				{"net.ipv4.tcp_mtu_probing", "1", "profile fasterdata-40g (test.hcl:29)", false},
				{"net.ipv4.tcp_rmem", "4096 87380 268435456", "profile fasterdata-40g (test.hcl:29)", false},
				{"net.ipv4.tcp_wmem", "4096 65536 268435456", "profile fasterdata-40g (test.hcl:29)", false},
				{"net.ipv4.tcp_no_metrics_save", "1", "profile fasterdata-40g (test.hcl:29)", false},
			}
			for _, tt := range tests {
				o := tu.SysctlOrigins[tt.key]
				if tu.Sysctl[tt.key] != tt.value || o.String() != tt.origin || o.Optional != tt.optional {
					t.Errorf("%s = %q from %s (optional %v), want %q from %s (optional %v)",
						tt.key, tu.Sysctl[tt.key], o, o.Optional, tt.value, tt.origin, tt.optional)
				}
			}
			if len(tu.Sysctl) != len(tests) || len(tu.SysctlRanges) != 1 {
				t.Errorf("sysctl %v, file keys %v", tu.Sysctl, tu.SysctlRanges)
			}
			eth1, eth2 := tu.Interfaces[0], tu.Interfaces[1]
			if eth1.MTU != 9000 || eth1.MTUOrigin.String() != "profile fasterdata-40g (test.hcl:29)" ||
				!strings.HasPrefix(eth1.MTUOrigin.Source, "https://fasterdata.es.net/") || eth1.IRQOrigin.String() != "test.hcl:34" {
				t.Errorf("eth1: mtu %d from %s, irq from %s", eth1.MTU, eth1.MTUOrigin, eth1.IRQOrigin)
			}
			if eth2.MTU != 1500 || eth2.MTUOrigin.String() != "test.hcl:37" || eth2.TxQueueLen != 1000 || eth2.TxQueueLenOrigin.String() != "test.hcl:38" {
				t.Errorf("eth2: mtu %d from %s, txqueuelen %d from %s", eth2.MTU, eth2.MTUOrigin, eth2.TxQueueLen, eth2.TxQueueLenOrigin)
			}
			if eth1.TxQueueLen != 10000 || eth1.TxQueueLenOrigin.String() != "profile fasterdata-40g (test.hcl:29)" ||
				!strings.Contains(eth1.TxQueueLenOrigin.Source, "fasterdata-tuning") {
				t.Errorf("eth1: txqueuelen %d from %s (%s)", eth1.TxQueueLen, eth1.TxQueueLenOrigin, eth1.TxQueueLenOrigin.Source)
			}
			if len(tu.Notes) == 0 || !strings.Contains(strings.Join(tu.Notes, "\n"), "irqbalance") {
				t.Errorf("notes: %q", tu.Notes)
			}
		}},
		{"no base: every value from the file", `tuning "t" {
  sysctl = { "net.core.default_qdisc" = "fq" }
}`, func(t *testing.T, c *Config) {
			tu := c.Tuning("t")
			o := tu.SysctlOrigins["net.core.default_qdisc"]
			if tu.Base != "" || o.Profile != "" || o.Optional || o.String() != "test.hcl:29" || len(tu.Notes) != 0 {
				t.Errorf("%+v from %s", tu, o)
			}
		}},
		{"explicit agent choice", `whitelist "w" {
  clients = ["10.1.0.0/24"]
  server = "10.2.0.10"
  server_port = 5201
  client_agent = "ag-a"
  server_agent = "ag-b"
}`, func(t *testing.T, c *Config) {
			if c.Whitelists[0].ServerAgent != "ag-b" {
				t.Errorf("server agent %q", c.Whitelists[0].ServerAgent)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.check(t, mustParse(t, base(tt.extra)))
		})
	}
}

func TestFileProblems(t *testing.T) {
	dir := t.TempDir()
	huge := filepath.Join(dir, "huge.hcl")
	f, err := os.Create(huge)
	if err != nil {
		t.Fatal(err)
	}
	line := []byte("# padding padding padding padding padding padding padding padding\n")
	for written := 0; written < 50<<20; written += len(line) {
		if _, err := f.Write(line); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	garbage := filepath.Join(dir, "garbage.hcl")
	junk := make([]byte, 4096)
	for i := range junk {
		junk[i] = byte(i*7919 + i>>3)
	}
	os.WriteFile(garbage, junk, 0o644)
	empty := filepath.Join(dir, "empty.hcl")
	os.WriteFile(empty, []byte("  \n\n"), 0o644)
	unreadable := filepath.Join(dir, "unreadable.hcl")
	os.WriteFile(unreadable, []byte("security {}"), 0o000)

	tests := []struct {
		path, want string
	}{
		{filepath.Join(dir, "missing.hcl"), "Config file not found"},
		{dir, "Config path is a directory"},
		{huge, "Config file is too large"},
		{garbage, "Config file is not text"},
		{empty, "Config file is empty"},
	}
	if os.Geteuid() != 0 {
		// root reads files regardless of mode, so this case is only
		// meaningful for other users.
		tests = append(tests, struct{ path, want string }{unreadable, "Config file is not readable"})
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			cfg, _, diags := LoadFile(tt.path)
			if cfg != nil || len(diags) != 1 || diags[0].Summary != tt.want {
				t.Fatalf("got %v, want one %q", diags, tt.want)
			}
			if diags[0].Subject == nil || diags[0].Subject.Filename != tt.path {
				t.Fatalf("diagnostic does not name the file: %+v", diags[0].Subject)
			}
		})
	}
}

func TestValueParsers(t *testing.T) {
	cpus, err := ParseCPUList("8,0-3, 2")
	if err != nil || FormatCPUList(cpus) != "0-3,8" {
		t.Errorf("cpu list: %v %v", cpus, err)
	}
	for _, bad := range []string{"", "-1", "3-1", "x", "0-99999"} {
		if _, err := ParseCPUList(bad); err == nil {
			t.Errorf("ParseCPUList(%q) accepted", bad)
		}
	}
	sizes := map[string]int64{"60000": 60000, "60KB": 60000, "64KiB": 65536, "1GiB": 1 << 30, "1.5MB": 1500000, "2 mib": 2 << 20}
	for in, want := range sizes {
		if got, err := ParseByteSize(in); err != nil || got != want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "KB", "-1", "1.5B", "1e400", "NaN"} {
		if _, err := ParseByteSize(bad); err == nil {
			t.Errorf("ParseByteSize(%q) accepted", bad)
		}
	}
	dpids := map[string]uint64{"00:00:00:00:00:00:00:01": 1, "0x10": 16, "12": 12, "ff:00:00:00:00:00:00:00": 0xff00000000000000}
	for in, want := range dpids {
		if got, err := ParseDatapathID(in); err != nil || got != want {
			t.Errorf("ParseDatapathID(%q) = %x, %v", in, got, err)
		}
	}
	if FormatDatapathID(0xa01) != "0000000000000a01" {
		t.Errorf("FormatDatapathID")
	}
	if _, err := ParseMAC("01:00:5e:00:00:01"); err == nil {
		t.Errorf("multicast MAC accepted")
	}
	if p, err := ParsePrefix("10.0.0.1"); err != nil || p != netip.MustParsePrefix("10.0.0.1/32") {
		t.Errorf("bare address as prefix: %v %v", p, err)
	}
}

func FuzzParse(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/errors/*.hcl")
	seeds = append(seeds, "../../sos.hcl.example", "../../examples/minimal.hcl", "../../examples/three-sites.hcl")
	for _, s := range seeds {
		if b, err := os.ReadFile(s); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("site \"a\" { prefixes = [\"10.0.0.0/8\"] }"))
	f.Fuzz(func(t *testing.T, src []byte) {
		cfg, diags := Parse(Source{Filename: "fuzz.hcl", Bytes: src})
		if cfg == nil && !diags.HasErrors() {
			t.Fatalf("no config and no error")
		}
		for _, d := range diags {
			if d.Subject == nil {
				t.Fatalf("diagnostic without position: %s", d.Summary)
			}
		}
		var b bytes.Buffer
		WriteDiagnostics(&b, diags, src)
	})
}

// TestSwitchTLSAndAllow: switches that connect to a controller with a tls
// block require TLS unless they say tls = false; dialed switches never do.
func TestSwitchTLSAndAllow(t *testing.T) {
	src := `
security { psk_file = "/etc/psk" }
controller {
  node   = "ctl"
  listen = "192.0.2.1:6653"
  tls {
    cert_file = "/etc/sosappliance/controller-cert.pem"
    key_file  = "/etc/sosappliance/controller-privkey.pem"
    ca_file   = "/etc/sosappliance/switchca-cacert.pem"
  }
}
site "a" {
  prefixes = ["10.1.0.0/24"]
  switch "inherits" {
    datapath_id = "0x1"
    allow       = ["192.0.2.10", "198.51.100.0/24"]
    tls_name    = "sw-inherits"
  }
  switch "plain" {
    datapath_id = "0x2"
    tls         = false
  }
  switch "dialed" {
    datapath_id = "0x3"
    connect     = "tcp:192.0.2.12:6653"
  }
}
`
	cfg, diags := Parse(Source{Filename: "tls.hcl", Bytes: []byte(src)})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	if tls := cfg.Controller.TLS; tls == nil || tls.CAFile != "/etc/sosappliance/switchca-cacert.pem" || cfg.Controller.Listen != "192.0.2.1:6653" {
		t.Fatalf("controller: %+v", cfg.Controller)
	}
	want := map[string]bool{"inherits": true, "plain": false, "dialed": false}
	for name, tls := range want {
		if got := cfg.Switch(name).TLS; got != tls {
			t.Errorf("switch %s: tls = %v, want %v", name, got, tls)
		}
	}
	if got := cfg.Switch("inherits").TLSName; got != "sw-inherits" {
		t.Errorf("tls_name = %q", got)
	}
	allow := cfg.Switch("inherits").Allow
	if len(allow) != 2 || allow[0].String() != "192.0.2.10/32" || allow[1].String() != "198.51.100.0/24" {
		t.Errorf("allow = %v", allow)
	}
}

// health_allow and metrics_allow read like a switch's allow: addresses or
// prefixes, IPv4 or IPv6; without them the lists are empty (any source).
func TestHealthAndMetricsAllow(t *testing.T) {
	src := `
security { psk_file = "/etc/psk" }
controller { node = "ctl" }
daemon { metrics_allow = ["192.0.2.10", "2001:db8::/64"] }
site "a" {
  prefixes = ["10.1.0.0/24"]
  switch "sw" { datapath_id = "0x1" }
  agent "listed" {
    node         = "ctl"
    switch       = "sw"
    switch_port  = 2
    mac          = "02:00:00:00:01:02"
    address      = "10.1.0.2"
    interface    = "eth0"
    health_allow = ["10.1.0.2", "192.0.2.0/28"]
  }
  agent "open" {
    node        = "n"
    switch      = "sw"
    switch_port = 3
    mac         = "02:00:00:00:01:03"
    address     = "10.1.0.3"
    interface   = "eth0"
  }
}
`
	cfg := mustParse(t, src)
	if got := fmt.Sprint(cfg.Daemon.MetricsAllow); got != "[192.0.2.10/32 2001:db8::/64]" {
		t.Errorf("metrics_allow = %s", got)
	}
	if got := fmt.Sprint(cfg.Agent("listed").HealthAllow); got != "[10.1.0.2/32 192.0.2.0/28]" {
		t.Errorf("health_allow = %s", got)
	}
	if got := cfg.Agent("open").HealthAllow; len(got) != 0 {
		t.Errorf("no health_allow gave %v, want none (any source)", got)
	}
}
