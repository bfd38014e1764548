package config

import (
	"os"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestAutoStreams: streams = "auto" decodes to the whitelist's maximum
// (max_streams, default DefaultAutoMaxStreams) with AutoStreams set; a
// fixed count keeps its meaning; mistakes are diagnostics at their place.
func TestAutoStreams(t *testing.T) {
	lab, err := os.ReadFile("../../examples/lab/sos.hcl")
	if err != nil {
		t.Fatal(err)
	}
	with := func(attrs string) string {
		return string(lab) + `
whitelist "auto" {
  clients     = ["10.10.1.0/24"]
  server      = "10.10.2.10"
  server_port = 6000
` + attrs + "\n}\n"
	}
	for _, tc := range []struct {
		attrs   string
		streams int
		auto    bool
	}{
		{`  streams = "auto"`, DefaultAutoMaxStreams, true},
		{"  streams = \"auto\"\n  max_streams = 16", 16, true},
		{"  streams = 12", 12, false},
		{"", DefaultStreams, false},
	} {
		c := mustParse(t, with(tc.attrs))
		var w *Whitelist
		for _, x := range c.Whitelists {
			if x.Name == "auto" {
				w = x
			}
		}
		if w == nil {
			t.Fatalf("%q: no whitelist", tc.attrs)
		}
		if w.Streams != tc.streams || w.AutoStreams != tc.auto {
			t.Errorf("%q: streams %d auto %v, want %d %v", tc.attrs, w.Streams, w.AutoStreams, tc.streams, tc.auto)
		}
	}
	// The default max_streams keeps within limits.max_streams: before,
	// streams = "auto" under limits { max_streams = 32 } was refused
	// for the default's 64, which the file did not write. Found by
	// review (helper-88).
	minimal, err := os.ReadFile("../../examples/minimal.hcl")
	testsupport.RequireNoError(t, err)
	c := mustParse(t, strings.Replace(string(minimal), `server_ports = ["5201-5204"]`, "server_ports = [\"5201-5204\"]\n  streams = \"auto\"", 1)+"limits {\n  max_streams = 32\n}\n")
	for _, w := range c.Whitelists {
		if w.Streams != 32 || !w.AutoStreams {
			t.Errorf(`streams = "auto" under limits.max_streams 32: max %d, want 32`, w.Streams)
		}
	}
	for attrs, want := range map[string]string{
		`  streams = "lots"`:                         `streams must be a number or "auto"`,
		"  streams = 8\n  max_streams = 16":          `sets max_streams without streams = "auto"`,
		"  streams = \"auto\"\n  max_streams = 9000": "more than limits.max_streams 8192",
		"  streams = true":                           "streams must be a whole number",
	} {
		_, diags := parseString(t, with(attrs))
		if !diags.HasErrors() || !strings.Contains(diags.Error(), want) || !strings.Contains(diags.Error(), "test.hcl:") {
			t.Errorf("%q: %v, want %q at a place in the file", attrs, diags, want)
		}
	}
}
