package config

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

func allowUsersConfig(daemon, agent string) string {
	return `
security { psk_file = "/etc/psk" }
controller { node = "ctl" }
daemon {
` + daemon + `
}
site "a" {
  prefixes = ["10.1.0.0/24"]
  switch "sw" { datapath_id = "0x1" }
  agent "a1" {
    node         = "ctl"
    switch       = "sw"
    switch_port  = 2
    mac          = "02:00:00:00:01:02"
    address      = "10.1.0.2"
    interface    = "eth0"
` + agent + `
  }
}
`
}

// TestAllowUsersRead: metrics_allow_users and health_allow_users are
// kept as written (names or uids); the node that uses them looks them up.
func TestAllowUsersRead(t *testing.T) {
	cfg := mustParse(t, allowUsersConfig(
		`metrics_allow = ["127.0.0.1"]
metrics_allow_users = ["prometheus", "110", "node-exporter"]`,
		`health_allow = ["10.1.0.2"]
health_allow_users = ["nagios"]`))
	if got := fmt.Sprint(cfg.Daemon.MetricsAllowUsers); got != "[prometheus 110 node-exporter]" {
		t.Errorf("metrics_allow_users = %s", got)
	}
	if got := fmt.Sprint(cfg.Agent("a1").HealthAllowUsers); got != "[nagios]" {
		t.Errorf("health_allow_users = %s", got)
	}
}

// TestAllowUsersRefused: a list of users without its allow list (with
// none, every source and user is admitted, so the list would restrict
// nothing its writer meant it to), or an entry that is no user name or
// uid, is an error at its line.
func TestAllowUsersRefused(t *testing.T) {
	for _, c := range []struct{ daemon, agent, want string }{
		{`metrics_allow_users = ["prometheus"]`, ``, `daemon metrics_allow_users is set without metrics_allow`},
		{``, `health_allow_users = ["nagios"]`, `agent "a1" health_allow_users is set without health_allow`},
		{`metrics_allow = ["127.0.0.1"]
metrics_allow_users = [""]`, ``, `daemon metrics_allow_users: "" is not a user name or uid`},
		{``, `health_allow = ["10.1.0.2"]
health_allow_users = ["a b"]`, `agent "a1" health_allow_users: "a b" is not a user name or uid`},
		{`metrics_allow = ["127.0.0.1"]
metrics_allow_users = ["4294967296"]`, ``, `daemon metrics_allow_users: "4294967296" is not a user name or uid`},
		{`metrics_allow = ["127.0.0.1"]
metrics_allow_users = ["-1"]`, ``, `daemon metrics_allow_users: "-1" is not a user name or uid`},
	} {
		src := allowUsersConfig(c.daemon, c.agent)
		_, diags := parseString(t, src)
		var b bytes.Buffer
		WriteDiagnostics(&b, diags, []byte(src))
		if !diags.HasErrors() || !strings.Contains(b.String(), c.want) || !strings.Contains(b.String(), "test.hcl:") {
			t.Errorf("%s%s: got\n%s\nwant an error at its line with %q", c.daemon, c.agent, b.String(), c.want)
		}
	}
}
