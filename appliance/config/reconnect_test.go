package config

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestReconnectTimeout: limits.reconnect_timeout decodes, defaults, and a
// bad value is a diagnostic naming it.
func TestReconnectTimeout(t *testing.T) {
	lab, err := os.ReadFile("../../examples/lab/sos.hcl")
	if err != nil {
		t.Fatal(err)
	}
	base := func(extra string) string { return string(lab) + extra }
	if got := mustParse(t, base("")).Limits.ReconnectTimeout; got != DefaultReconnectTimeout {
		t.Errorf("default reconnect_timeout %v, want %v", got, DefaultReconnectTimeout)
	}
	c := mustParse(t, base(`limits {
  reconnect_timeout = "90s"
}`))
	if c.Limits.ReconnectTimeout != 90*time.Second {
		t.Errorf("reconnect_timeout %v", c.Limits.ReconnectTimeout)
	}
	_, diags := parseString(t, base(`limits {
  reconnect_timeout = "never"
}`))
	if !diags.HasErrors() || !strings.Contains(diags.Error(), "reconnect_timeout") {
		t.Errorf("bad reconnect_timeout: %v", diags)
	}
}
