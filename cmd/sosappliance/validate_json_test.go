package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// validate had no --json, so CI jobs and editors scraped its text. Now
// validate --json prints one JSON document on stdout, whatever the file:
// valid, the counts, each diagnostic with its place (or the node whose
// compile failed), and for a valid file what it holds; the exit status is
// as without it. Found by review (helper-81).
func TestValidateJSON(t *testing.T) {
	dir := t.TempDir()
	src, err := os.ReadFile("../../examples/minimal.hcl")
	testsupport.RequireNoError(t, err)
	good := filepath.Join(dir, "good.hcl")
	writeConfig(t, good, string(src))
	bad := filepath.Join(dir, "bad.hcl")
	writeConfig(t, bad, string(src)+"\npool \"agent-wst\" {}\n")
	node := filepath.Join(dir, "node.hcl")
	// Two tunings of one node that set one sysctl differently: a problem
	// of that node's compile, with no place in the file.
	writeConfig(t, node, string(src)+`
tuning "t1" { sysctl = { "net.core.somaxconn" = "1024" } }
tuning "t2" { sysctl = { "net.core.somaxconn" = "2048" } }
node "agent-east" { tuning = ["t1", "t2"] }
`)
	type diag struct {
		Severity, Summary, Detail, Node string
		Range                           *struct {
			Filename string
			Start    struct{ Line, Column int }
		}
	}
	type report struct {
		Path        string
		Valid       bool
		Errors      int `json:"error_count"`
		Warnings    int `json:"warning_count"`
		Diagnostics []diag
		Sites       int
		Whitelists  []struct{ Name, Describe string }
	}
	run := func(path string, args ...string) (int, report) {
		t.Helper()
		code, out, errOut := runCLI(t, append([]string{"validate", "-json", "-c", path}, args...)...)
		var r report
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("validate --json -c %s: stdout is not JSON (%v):\n%s\nstderr:\n%s", path, err, out, errOut)
		}
		return code, r
	}

	code, r := run(good)
	if code != 0 || !r.Valid || r.Errors != 0 || r.Sites != 2 || len(r.Whitelists) != 1 || !strings.Contains(r.Whitelists[0].Describe, "->") {
		t.Errorf("a valid file: exit %d, %+v", code, r)
	}
	code, r = run(bad)
	if code != 1 || r.Valid || r.Errors != 1 || len(r.Diagnostics) != 1 {
		t.Fatalf("a bad pool: exit %d, %+v", code, r)
	}
	if d := r.Diagnostics[0]; d.Severity != "error" || !strings.Contains(d.Summary, `"agent-wst"`) || !strings.Contains(d.Detail, `"agent-west"`) ||
		d.Range == nil || d.Range.Filename != bad || d.Range.Start.Line != 48 {
		t.Errorf("a bad pool's diagnostic: %+v (range %+v)", d, d.Range)
	}
	code, r = run(node)
	if code != 1 || r.Valid || r.Errors != 1 || len(r.Diagnostics) != 1 || r.Diagnostics[0].Node != "agent-east" || r.Diagnostics[0].Range != nil {
		t.Errorf("a node's compile problem: exit %d, %+v", code, r)
	}
	code, r = run(filepath.Join(dir, "missing.hcl"))
	if code != 1 || r.Valid || r.Errors != 1 || !strings.Contains(r.Diagnostics[0].Summary, "not found") {
		t.Errorf("a missing file: exit %d, %+v", code, r)
	}
	if os.Geteuid() == 0 {
		testsupport.RequireNoError(t, os.Chmod(good, 0o666))
		code, r = run(good)
		if code != 0 || !r.Valid || r.Warnings != 1 || !strings.Contains(r.Diagnostics[0].Summary, "is writable by every user") {
			t.Errorf("a file others can write: exit %d, %+v", code, r)
		}
	}
}
