package config

import (
	"os"
	"path/filepath"
	"testing"
)

// TestControlSocketIn: the control socket of a file that does not
// validate is still read from its syntax (status beside a daemon that
// refused a reload of it), and so is one of a file that does not parse,
// from the blocks the parser reached (an edit left a block unclosed:
// helper-88); one that names none, or no absolute path, gives "".
func TestControlSocketIn(t *testing.T) {
	dir := t.TempDir()
	for src, want := range map[string]string{
		`daemon { control_socket = "/run/x/ctl.sock" }` + "\nwhitelist \"w\" { typo = 1 }\n": "/run/x/ctl.sock",
		`daemon { control_socket = "/run/x/ctl.sock"`:                                        "/run/x/ctl.sock",
		"daemon { control_socket = \"/run/x/ctl.sock\" }\nwhitelist \"w\" {\n":               "/run/x/ctl.sock",
		"whitelist \"w\" {\ndaemon { control_socket = \"/run/x/ctl.sock\" }\n":               "",
		`daemon { control_socket = "rel.sock" }`:                                             "",
		`daemon { control_socket = 5 }`:                                                      "",
		`daemon { state_path = "/var/lib/x/state.db" }`:                                      "",
		`site "a" { prefixes = ["10.0.0.0/8"] }`:                                             "",
	} {
		path := filepath.Join(dir, "sos.hcl")
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := ControlSocketIn(path); got != want {
			t.Errorf("%s: %q, want %q", src, got, want)
		}
	}
	if got := ControlSocketIn(filepath.Join(dir, "missing.hcl")); got != "" {
		t.Errorf("a missing file: %q", got)
	}
}
