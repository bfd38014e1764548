package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sosappliance/sosappliance/appliance/plan"
	"github.com/sosappliance/sosappliance/appliance/store"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// cliMu makes the runCLI calls of parallel tests take turns: each swaps
// the process's os.Stdout and os.Stderr (review, helper-102: two at once
// raced, and one could put back the other's closed pipe).
var cliMu sync.Mutex

// runCLI runs the command in-process and captures what it prints.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cliMu.Lock()
	defer cliMu.Unlock()
	oldOut, oldErr := os.Stdout, os.Stderr
	rOut, wOut, _ := os.Pipe()
	rErr, wErr, _ := os.Pipe()
	os.Stdout, os.Stderr = wOut, wErr
	outc, errc := make(chan string), make(chan string)
	go func() { b, _ := io.ReadAll(rOut); outc <- string(b) }()
	go func() { b, _ := io.ReadAll(rErr); errc <- string(b) }()
	root := newRootCommand()
	root.SetOut(wOut)
	root.SetErr(wErr)
	root.SetIn(strings.NewReader(""))
	code = runCommand(root, args)
	wOut.Close()
	wErr.Close()
	os.Stdout, os.Stderr = oldOut, oldErr
	return code, <-outc, <-errc
}

func TestValidateCommand(t *testing.T) {
	code, out, _ := runCLI(t, "validate", "-c", "../../sos.hcl.example")
	if code != 0 || !strings.Contains(out, "is valid") {
		t.Fatalf("example: exit %d, %q", code, out)
	}
	code, _, errOut := runCLI(t, "validate", "-c", "../../appliance/config/testdata/errors/bad_values.hcl")
	if code != 1 {
		t.Fatalf("bad file: exit %d", code)
	}
	lines := 0
	for _, l := range strings.Split(errOut, "\n") {
		if strings.Contains(l, "bad_values.hcl:") && strings.Contains(l, ": error: ") {
			lines++
		}
	}
	if lines < 10 {
		t.Fatalf("want every diagnostic with file:line:col, got %d:\n%s", lines, errOut)
	}
	if code, _, _ := runCLI(t, "validate", "-c", "/nonexistent/sos.hcl"); code != 1 {
		t.Fatalf("missing file: exit %d", code)
	}
}

func TestVersionCommand(t *testing.T) {
	code, out, _ := runCLI(t, "version")
	if code != 0 || !strings.HasPrefix(out, "sosappliance ") {
		t.Fatalf("version: %d %q", code, out)
	}
}

// TestPlanApplyRollback drives the host commands against a temp tree shaped
// like /proc/sys, for a node whose only role is sysctl tuning.
func TestPlanApplyRollback(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	sys := filepath.Join(root, "proc", "sys", "net", "core")
	if err := os.MkdirAll(sys, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(sys, "somaxconn"), []byte("128\n"), 0o644)
	os.WriteFile(filepath.Join(sys, "rmem_max"), []byte("212992\n"), 0o644)
	cfgPath := filepath.Join(dir, "sos.hcl")
	writeCfg := func(somaxconn string) {
		src := `
security { psk_file = "/etc/psk" }
site "a" { prefixes = ["10.1.0.0/24"] }
tuning "t" {
  sysctl = {
    "net.core.somaxconn" = "` + somaxconn + `"
    "net.core.rmem_max"  = "67108864"
  }
}
node "host1" { tuning = ["t"] }
`
		if err := os.WriteFile(cfgPath, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeCfg("4096")
	common := []string{"-c", cfgPath, "--node", "host1", "--state", filepath.Join(dir, "state.db"), "--root", root}
	cli := func(args ...string) (int, string, string) {
		return runCLI(t, append(args, common...)...)
	}
	read := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(sys, name))
		return strings.TrimSpace(string(b))
	}

	code, out, errOut := cli("plan", "-detailed-exitcode")
	if code != 2 || !strings.Contains(out, `~ net.core.somaxconn: "128" -> "4096"`) {
		t.Fatalf("first plan: exit %d\n%s%s", code, out, errOut)
	}
	if code, _, _ := cli("apply"); code != 1 {
		t.Fatalf("apply without a terminal or --auto-approve must refuse, exit %d", code)
	}
	if read("somaxconn") != "128" {
		t.Fatal("refused apply changed the host")
	}
	planFile := filepath.Join(dir, "saved.plan")
	if code, _, errOut := cli("plan", "-out", planFile); code != 0 {
		t.Fatalf("plan -out: %d %s", code, errOut)
	}
	if code, out, errOut := cli("apply", "-auto-approve"); code != 0 || !strings.Contains(out, "Apply complete: 2 change(s)") {
		t.Fatalf("apply: exit %d\n%s%s", code, out, errOut)
	}
	if read("somaxconn") != "4096" || read("rmem_max") != "67108864" {
		t.Fatalf("host not converged: %s %s", read("somaxconn"), read("rmem_max"))
	}
	if code, out, _ := cli("plan", "-detailed-exitcode"); code != 0 || !strings.Contains(out, "No changes") {
		t.Fatalf("second plan not empty: exit %d\n%s", code, out)
	}
	code, _, errOut = runCLI(t, "apply", planFile, "--node", "host1", "--state", filepath.Join(dir, "state.db"), "--root", root)
	if code != 1 || !strings.Contains(errOut, "stale") {
		t.Fatalf("stale saved plan: exit %d %s", code, errOut)
	}
	// A plan saved now applies.
	writeCfg("8192")
	if code, _, errOut := cli("plan", "-json", "-out", planFile); code != 0 {
		t.Fatalf("plan -json: %s", errOut)
	}
	code, out, errOut = runCLI(t, "apply", planFile, "--node", "host1", "--state", filepath.Join(dir, "state.db"), "--root", root)
	if code != 0 || read("somaxconn") != "8192" {
		t.Fatalf("apply saved plan: exit %d %s %s", code, out, errOut)
	}
	if code, out, errOut := cli("rollback", "--auto-approve"); code != 0 || !strings.Contains(out, "Rollback complete") {
		t.Fatalf("rollback: exit %d\n%s%s", code, out, errOut)
	}
	if read("somaxconn") != "128" || read("rmem_max") != "212992" {
		t.Fatalf("rollback did not restore: %s %s", read("somaxconn"), read("rmem_max"))
	}
	os.WriteFile(cfgPath, []byte(`
security { psk_file = "/etc/psk" }
site "a" { prefixes = ["10.1.0.0/24"] }
tuning "t" { sysctl = { "net.core.nonexistent" = "1" } }
node "host1" { tuning = ["t"] }
`), 0o644)
	if code, _, errOut := cli("plan"); code != 1 || !strings.Contains(errOut, "net.core.nonexistent") {
		t.Fatalf("unknown sysctl at plan time: exit %d %s", code, errOut)
	}
}

// TestSavedPlanIsRefusedElsewhere saves a plan and applies it to another
// state database, as another node, and at a moved-on serial: each is
// refused with its reason before the host changes, and the plan applies
// where it was made.
func TestSavedPlanIsRefusedElsewhere(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	sys := filepath.Join(root, "proc", "sys", "net", "core")
	testsupport.RequireNoError(t, os.MkdirAll(sys, 0o755))
	testsupport.RequireNoError(t, os.WriteFile(filepath.Join(sys, "somaxconn"), []byte("128\n"), 0o644))
	cfgPath := filepath.Join(dir, "sos.hcl")
	testsupport.RequireNoError(t, os.WriteFile(cfgPath, []byte(`
security { psk_file = "/etc/psk" }
site "a" { prefixes = ["10.1.0.0/24"] }
tuning "t" { sysctl = { "net.core.somaxconn" = "4096" } }
node "host1" { tuning = ["t"] }
node "host2" { tuning = ["t"] }
`), 0o644))
	stateA, stateB := filepath.Join(dir, "a.db"), filepath.Join(dir, "b.db")
	planFile := filepath.Join(dir, "saved.plan")
	if code, _, errOut := runCLI(t, "plan", "-out", planFile, "-c", cfgPath, "--node", "host1", "--state", stateA, "--root", root); code != 0 {
		t.Fatalf("plan -out: exit %d %s", code, errOut)
	}
	data, err := os.ReadFile(planFile)
	testsupport.RequireNoError(t, err)
	saved, err := plan.Decode(data)
	testsupport.RequireNoError(t, err)
	lineage := func(path string) string {
		st, err := store.Open(path, store.Options{})
		testsupport.RequireNoError(t, err)
		defer st.Close()
		return st.Lineage()
	}
	if saved.Node != "host1" || saved.Lineage != lineage(stateA) || saved.Serial != 0 {
		t.Fatalf("saved plan records node %q, lineage %q, serial %d; state a is lineage %s", saved.Node, saved.Lineage, saved.Serial, lineage(stateA))
	}
	apply := func(node, state string) (int, string, string) {
		return runCLI(t, "apply", planFile, "--node", node, "--state", state, "--root", root)
	}
	somaxconn := func() string {
		b, _ := os.ReadFile(filepath.Join(sys, "somaxconn"))
		return strings.TrimSpace(string(b))
	}

	// Another database starts at serial 0 too: only the lineage tells.
	lineageB := lineage(stateB)
	code, _, errOut := apply("host1", stateB)
	want := fmt.Sprintf("plan belongs to another state (lineage %s), this state is lineage %s", saved.Lineage, lineageB)
	if code != 1 || !strings.Contains(errOut, want) {
		t.Fatalf("another state: exit %d %q, want %q", code, errOut, want)
	}
	// No database there: refused, and none made (it would be another).
	missing := filepath.Join(filepath.Dir(stateB), "missing.db")
	if code, _, errOut := apply("host1", missing); code != 1 || !strings.Contains(errOut, "no state database at "+missing) {
		t.Fatalf("a missing state: exit %d %q", code, errOut)
	}
	if _, err := os.Stat(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a refused saved plan made a state database: %v", err)
	}
	code, _, errOut = apply("host2", stateA)
	if code != 1 || !strings.Contains(errOut, "plan was made for node host1, this is node host2") {
		t.Fatalf("another node: exit %d %q", code, errOut)
	}
	if somaxconn() != "128" {
		t.Fatal("a refused plan changed the host")
	}
	if code, out, errOut := apply("host1", stateA); code != 0 || somaxconn() != "4096" {
		t.Fatalf("the plan where it was made: exit %d %s %s", code, out, errOut)
	}
	code, _, errOut = apply("host1", stateA)
	if code != 1 || !strings.Contains(errOut, "plan is stale: it was made at state serial 0 but the state is now at serial 1") {
		t.Fatalf("applied twice: exit %d %q", code, errOut)
	}
}

func TestNormalizeArgs(t *testing.T) {
	got := normalizeArgs([]string{"plan", "-json", "-out=x", "-c", "f", "-detailed-exitcode", "--", "-json"})
	want := []string{"plan", "--json", "--out=x", "-c", "f", "--detailed-exitcode", "--", "-json"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("got %v", got)
	}
}
