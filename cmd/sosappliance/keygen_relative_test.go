package main

import (
	"regexp"
	"strings"
	"testing"
)

// TestKeygenRelativeOut: `keygen --out agent.key` (a relative
// path, natural when run in /etc/sosappliance) writes the file and prints
// its absolute path as key_file, which the configuration takes. (Found by
// review: it printed key_file = "agent.key", which validate refuses.)
func TestKeygenRelativeOut(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	code, stdout, stderr := runCLI(t, "keygen", "--out", "agent.key")
	if code != 0 {
		t.Fatalf("keygen: exit %d\n%s%s", code, stdout, stderr)
	}
	m := regexp.MustCompile(`key_file\s*=\s*"([^"]*)"`).FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("keygen printed no key_file for a non-default path:\n%s", stdout)
	}
	if !strings.HasPrefix(m[1], "/") {
		t.Errorf("keygen printed key_file = %q, which validate refuses (key_file must be an absolute path):\n%s", m[1], stdout)
	}
}
