package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestKeygen: keygen writes the private key owner-only and prints the
// public_key line (and key_file when not the default); a second keygen
// to the same file is refused and leaves it alone; `validate` takes the
// printed key in an agent block.
func TestKeygen(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "agent.key")
	code, stdout, stderr := runCLI(t, "keygen", "--out", out)
	if code != 0 {
		t.Fatalf("keygen: exit %d\n%s%s", code, stdout, stderr)
	}
	m := regexp.MustCompile(`public_key = "([A-Za-z0-9+/=]{44})"`).FindStringSubmatch(stdout)
	if m == nil || !strings.Contains(stdout, `key_file   = "`+out+`"`) {
		t.Fatalf("keygen printed:\n%s", stdout)
	}
	if st, err := os.Stat(out); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", err, st)
	}
	key, _ := os.ReadFile(out)
	if code, _, stderr := runCLI(t, "keygen", "--out", out); code == 0 || !strings.Contains(stderr, "exists") {
		t.Errorf("a second keygen: exit %d, %s", code, stderr)
	}
	if again, _ := os.ReadFile(out); string(again) != string(key) {
		t.Error("the refused keygen changed the key file")
	}
	// The example with both agents keyed validates; with one only it
	// does not.
	_, stdout2, _ := runCLI(t, "keygen", "--out", filepath.Join(dir, "utah.key"))
	m2 := regexp.MustCompile(`public_key = "([A-Za-z0-9+/=]{44})"`).FindStringSubmatch(stdout2)
	if m2 == nil {
		t.Fatalf("second keygen printed:\n%s", stdout2)
	}
	example, err := os.ReadFile("../../sos.hcl.example")
	if err != nil {
		t.Fatal(err)
	}
	keyed := strings.Replace(string(example), `agent "agent-clemson" {`+"\n", `agent "agent-clemson" {`+"\n    public_key = \""+m[1]+"\"\n", 1)
	half := filepath.Join(dir, "half.hcl")
	if err := os.WriteFile(half, []byte(keyed), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, stdout, stderr := runCLI(t, "validate", "-c", half); code == 0 || !strings.Contains(stdout+stderr, `Agent "agent-utah" has no public_key`) {
		t.Errorf("validate with one agent keyed: exit %d\n%s%s", code, stdout, stderr)
	}
	keyed = strings.Replace(keyed, `agent "agent-utah" {`+"\n", `agent "agent-utah" {`+"\n    public_key = \""+m2[1]+"\"\n", 1)
	whole := filepath.Join(dir, "whole.hcl")
	if err := os.WriteFile(whole, []byte(keyed), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, stdout, stderr := runCLI(t, "validate", "-c", whole); code != 0 {
		t.Errorf("validate with every agent keyed: exit %d\n%s%s", code, stdout, stderr)
	}
}
