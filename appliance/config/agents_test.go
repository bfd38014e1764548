package config

import (
	"slices"
	"strings"
	"testing"
)

// twoAgentSites has two agents in each of sites a and b; extra adds blocks.
func twoAgentSites(extra string) string {
	return `
security { psk_file = "/etc/psk" }
controller { node = "ctl" }
site "a" {
  prefixes = ["10.1.0.0/24"]
  switch "sw-a" { datapath_id = "0x1" }
  agent "a2" {
    node = "na2"
    switch = "sw-a"
    switch_port = 4
    mac = "02:00:00:00:01:02"
    address = "10.1.0.3"
    interface = "eth1"
  }
  agent "a1" {
    node = "na1"
    switch = "sw-a"
    switch_port = 3
    mac = "02:00:00:00:01:01"
    address = "10.1.0.2"
    interface = "eth1"
  }
}
site "b" {
  prefixes = ["10.2.0.0/24"]
  switch "sw-b" { datapath_id = "0x2" }
  agent "b1" {
    node = "nb1"
    switch = "sw-b"
    switch_port = 3
    mac = "02:00:00:00:02:01"
    address = "10.2.0.2"
    interface = "eth1"
  }
  agent "b2" {
    node = "nb2"
    switch = "sw-b"
    switch_port = 4
    mac = "02:00:00:00:02:02"
    address = "10.2.0.3"
    interface = "eth1"
  }
}
` + extra
}

func TestWhitelistUsesEveryAgentOfItsSitesByDefault(t *testing.T) {
	c := mustParse(t, twoAgentSites(`whitelist "w" {
  clients = ["10.1.0.0/25"]
  server = "10.2.0.10"
  server_port = 5201
}
whitelist "subset" {
  clients = ["10.1.0.128/25"]
  server = "10.2.0.10"
  server_port = 5202
  client_agents = ["a1", "a2"]
  server_agent = "b2"
}`))
	w, sub := c.Whitelists[0], c.Whitelists[1]
	// Declaration order, not the file's list order: every node deals
	// the buckets alike.
	if !slices.Equal(w.ClientAgents, []string{"a2", "a1"}) || !slices.Equal(w.ServerAgents, []string{"b1", "b2"}) {
		t.Errorf("default agents: client %v server %v", w.ClientAgents, w.ServerAgents)
	}
	if w.ClientAgent != "a2" || w.ServerAgent != "b1" {
		t.Errorf("first agents: %q %q", w.ClientAgent, w.ServerAgent)
	}
	if !slices.Equal(sub.ClientAgents, []string{"a2", "a1"}) || !slices.Equal(sub.ServerAgents, []string{"b2"}) {
		t.Errorf("subset agents: client %v server %v", sub.ClientAgents, sub.ServerAgents)
	}
	if d := w.Describe(); !strings.HasSuffix(d, "{a2,a1} -> {b1,b2}") {
		t.Errorf("describe: %s", d)
	}
	if d := sub.Describe(); !strings.HasSuffix(d, "{a2,a1} -> b2") {
		t.Errorf("describe: %s", d)
	}
	if c.Spread.Mode != "port" || c.SpreadBits() != 4 {
		t.Errorf("spread defaults: %+v bits %d", c.Spread, c.SpreadBits())
	}
}

func TestSpreadBlock(t *testing.T) {
	c, diags := parseString(t, twoAgentSites(`spread {
  mode = "address"
  bits = 6
}
whitelist "w" {
  clients = ["10.1.0.0/24"]
  server = "10.2.0.10"
  server_port = 5201
}`))
	if diags.HasErrors() {
		t.Fatalf("diagnostics: %v", diags)
	}
	if c.Spread.Mode != "address" || c.SpreadBits() != 6 {
		t.Errorf("spread: %+v bits %d", c.Spread, c.SpreadBits())
	}
	var warned bool
	for _, d := range diags {
		if strings.Contains(d.Summary, "all connections of one client land on one agent") {
			warned = true
			if d.Subject == nil || d.Subject.Start.Line != 45 {
				t.Errorf("warning at %v, want the mode line 45", d.Subject)
			}
		}
	}
	if !warned {
		t.Errorf("no warning for address mode with several agents: %v", diags)
	}
}
