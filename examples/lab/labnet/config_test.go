package labnet

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/internal/portrange"
)

func TestConfigEditsKeepTheFileValid(t *testing.T) {
	cf, err := openConfig("../sos.hcl")
	if err != nil {
		t.Fatal(err)
	}
	dir := "/run/sosappliance-lab/abcd"
	cf.setPaths(dir)
	cf.SetWhitelist(Whitelist{Name: "bench-4-10000", Clients: []string{"10.10.1.0/24"}, Server: "10.10.2.10",
		ServerPort: 5400, Streams: 4, ChunkSize: 10000, QueueLength: 5})
	cf.SetWhitelist(Whitelist{Name: "iperf", Clients: []string{"10.10.1.0/24"}, Server: "10.10.2.10",
		ServerPort: 5201, Streams: 8, ChunkSize: 60000})
	cf.SetWhitelist(Whitelist{Name: "bench-auto-60000", Clients: []string{"10.10.1.0/24"}, Server: "10.10.2.10",
		ServerPort: 5401, Streams: 32, ChunkSize: 60000, AutoStreams: true})
	if !cf.RemoveWhitelist("http") {
		t.Error("http whitelist not found")
	}
	if cf.RemoveWhitelist("http") {
		t.Error("http whitelist removed twice")
	}
	cfg, err := cf.check("edited.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Security.PSKFile != filepath.Join(dir, "psk") || cfg.Daemon.StatePath != filepath.Join(dir, "state.db") ||
		cfg.Daemon.ControlSocket != filepath.Join(dir, "control.sock") || cfg.Daemon.MetricsListen != "" {
		t.Errorf("paths not moved: %+v %+v", cfg.Security, cfg.Daemon)
	}
	got := map[string]string{}
	for _, w := range cfg.Whitelists {
		streams := itoa(w.Streams)
		if w.AutoStreams {
			streams = "auto<=" + streams
		}
		got[w.Name] = strings.Join([]string{fmt.Sprint(w.Servers), portrange.Join(w.Ports), streams, itoa(w.ChunkSize), itoa(w.QueueLength)}, " ")
	}
	want := map[string]string{
		"iperf":            "[10.10.2.10/32] 5201 8 60000 0", // queue_length left out: no bound
		"bench-4-10000":    "[10.10.2.10/32] 5400 4 10000 5",
		"bench-auto-60000": "[10.10.2.10/32] 5401 auto<=32 60000 0",
		"range":            "[10.10.2.8/29] 50000-50063 16 60000 0",
		"http6":            "[fd10:10:0:2::10/128] 8081 64 60000 0",
	}
	if len(got) != len(want) {
		t.Errorf("whitelists %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("whitelist %s: %q, want %q", k, got[k], v)
		}
	}
	// Comments of the original survive the edit.
	if !strings.Contains(string(cf.file.Bytes()), "# The one-machine lab") {
		t.Error("comments lost")
	}
	if _, err := labSites(cfg); err != nil {
		t.Error(err)
	}
}

func TestConfigEditRejectsAnInvalidResult(t *testing.T) {
	cf, err := openConfig("../sos.hcl")
	if err != nil {
		t.Fatal(err)
	}
	// Same server and port as the iperf whitelist: overlapping.
	cf.SetWhitelist(Whitelist{Name: "twin", Clients: []string{"10.10.1.0/24"}, Server: "10.10.2.10", ServerPort: 5201})
	if _, err := cf.check("bad.hcl"); err == nil || !strings.Contains(err.Error(), "bad.hcl:") {
		t.Errorf("want a positioned diagnostic, got %v", err)
	}
}

func TestLabSitesRejectsConfigsTheLabCannotWire(t *testing.T) {
	base, err := os.ReadFile("../sos.hcl")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, from, to, want string }{
		{"agent on the WAN port", "switch_port = 2\n    mac         = \"02:5a:00:00:01:02\"", "switch_port = 3\n    mac         = \"02:5a:00:00:01:02\"", "taken by the lab's wiring"},
		{"controller elsewhere", `listen    = "127.0.0.1:6653"`, `listen    = "10.0.0.1:6653"`, "must listen on 127.0.0.1"},
		{"client outside site a", `10.10.1.`, `10.10.3.`, "not in site"},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := strings.ReplaceAll(string(base), c.from, c.to)
			if src == string(base) {
				t.Fatalf("%q not found in sos.hcl", c.from)
			}
			path := filepath.Join(t.TempDir(), "sos.hcl")
			if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
				t.Fatal(err)
			}
			cf, err := openConfig(path)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := cf.check(path)
			if err != nil {
				t.Fatalf("the config itself should be valid: %v", err)
			}
			if _, err := labSites(cfg); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want %q", err, c.want)
			}
		})
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// Two agents per site (lab --agents 2): the lab's copy gets a second agent
// at each site, valid, on port 5 with the next MAC and address, and every
// whitelist uses both agents of each of its sites.
func TestSecondAgentsConfig(t *testing.T) {
	cf, err := openConfig("../sos.hcl")
	if err != nil {
		t.Fatal(err)
	}
	first, err := cf.check("sos.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if err := cf.addSecondAgents(first); err != nil {
		t.Fatal(err)
	}
	cfg, err := cf.check("edited.hcl")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]string{
		"agent-a2": {"lab-agent-a2", "02:5a:00:00:01:03 10.10.1.3 5"},
		"agent-b2": {"lab-agent-b2", "02:5a:00:00:02:03 10.10.2.3 5"},
	}
	for name, w := range want {
		a := cfg.Agent(name)
		if a == nil {
			t.Fatalf("no agent %s:\n%s", name, cf.file.Bytes())
		}
		if got := fmt.Sprintf("%s %s %d", a.MAC, a.Address, a.SwitchPort); a.Node != w[0] || got != w[1] || len(a.Tuning) != 1 {
			t.Errorf("agent %s: node %s, %s, tuning %v; want %v", name, a.Node, got, a.Tuning, w)
		}
	}
	for _, w := range cfg.Whitelists {
		if len(w.ClientAgents) != 2 || len(w.ServerAgents) != 2 {
			t.Errorf("whitelist %s uses %v and %v, want both agents of each site", w.Name, w.ClientAgents, w.ServerAgents)
		}
	}
	sites, err := labSites(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(sites[0].agentHosts, sites[1].agentHosts); got != "[agent-a agent-a2] [agent-b agent-b2]" {
		t.Errorf("agent hosts %s", got)
	}
	// A whitelist may name one agent of each site.
	cf.SetWhitelist(Whitelist{Name: "one-pair", Clients: []string{"10.10.1.0/24"}, Server: "10.10.2.10", ServerPort: 5700,
		ClientAgents: []string{"agent-a2"}, ServerAgents: []string{"agent-b"}})
	if cfg, err := cf.check("edited.hcl"); err != nil {
		t.Fatal(err)
	} else {
		for _, w := range cfg.Whitelists {
			if w.Name == "one-pair" && fmt.Sprint(w.ClientAgents, w.ServerAgents) != "[agent-a2] [agent-b]" {
				t.Errorf("one-pair uses %v and %v", w.ClientAgents, w.ServerAgents)
			}
		}
	}
	// A config that already has two agents per site is left alone.
	again, err := cf.check("edited.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if err := cf.addSecondAgents(again); err != nil {
		t.Fatal(err)
	}
	if cfg, err := cf.check("edited.hcl"); err != nil || len(cfg.Sites[0].Agents) != 2 {
		t.Errorf("second edit: %v", err)
	}
}
