package main

import (
	"os"
	"path/filepath"
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

// TestKeygenRefusesPathsHCLReadsOtherwise: a path with a quote, a
// backslash or an interpolation sequence would be printed as a key_file
// that sos.hcl reads as another string; keygen refuses it and writes
// nothing.
func TestKeygenRefusesPathsHCLReadsOtherwise(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{`a"b.key`, `a\b.key`, "a${b}.key", "a%{b}.key"} {
		out := filepath.Join(dir, name)
		code, _, stderr := runCLI(t, "keygen", "--out", out)
		if code == 0 || !strings.Contains(stderr, "choose a path without") {
			t.Errorf("keygen --out %q: exit %d, %s", out, code, stderr)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("keygen --out %q wrote the file", out)
		}
	}
}
