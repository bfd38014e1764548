package config

import (
	"bytes"
	"net"
	"net/netip"
	"strings"
	"testing"
)

func healthAllowConfig(healthListen, healthAllow string) string {
	return `
security { psk_file = "/etc/psk" }
controller { node = "ctl" }
site "a" {
  prefixes = ["10.1.0.0/24"]
  switch "sw" { datapath_id = "0x1" }
  agent "a1" {
    node          = "ctl"
    switch        = "sw"
    switch_port   = 2
    mac           = "02:00:00:00:01:02"
    address       = "10.1.0.2"
    interface     = "eth0"
    health_listen = "` + healthListen + `"
    health_allow  = ` + healthAllow + `
  }
}
`
}

// TestZonedHealthListenAdmitted: a health_listen on an IPv6 link-local
// address carries a zone ("[fe80::1%eth0]:9878"); the check compares the
// address without it, as connlimit does at run time, so a health_allow
// listing fe80::1 is accepted (found by review: it was refused).
func TestZonedHealthListenAdmitted(t *testing.T) {
	src := healthAllowConfig("[fe80::1%eth0]:9878", `["fe80::1"]`)
	_, diags := parseString(t, src)
	if diags.HasErrors() {
		var b bytes.Buffer
		WriteDiagnostics(&b, diags, []byte(src))
		t.Errorf("health_allow = [\"fe80::1\"] with health_listen [fe80::1%%eth0]:9878 refused:\n%s", b.String())
	}
}

// TestUnspecifiedHealthListenChecked: a controller on the agent's node
// probes health_listen as written; a probe of 0.0.0.0 arrives from
// 127.0.0.1 (measured here), so a health_allow without loopback is refused
// for health_listen "0.0.0.0:9878" and one with it accepted (found by
// review: unspecified addresses were not checked).
func TestUnspecifiedHealthListenChecked(t *testing.T) {
	ln, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	got := make(chan netip.Addr, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- netip.Addr{}
			return
		}
		got <- c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
		c.Close()
	}()
	c, err := net.Dial("tcp", netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(port)).String())
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	from := <-got
	t.Logf("a probe of 0.0.0.0:%d arrives from %s", port, from)

	src := healthAllowConfig("0.0.0.0:9878", `["192.0.2.10"]`)
	_, diags := parseString(t, src)
	if !diags.HasErrors() || !strings.Contains(diags.Error(), "health_allow does not admit "+from.String()) {
		t.Errorf("health_listen 0.0.0.0:9878 with health_allow [192.0.2.10] and the controller on the node: %v; want a refusal naming %s, where its probes come from", diags, from)
	}
	if _, diags := parseString(t, healthAllowConfig("0.0.0.0:9878", `["127.0.0.1"]`)); diags.HasErrors() {
		t.Errorf("health_allow admitting loopback for health_listen 0.0.0.0:9878 refused: %v", diags)
	}
}
