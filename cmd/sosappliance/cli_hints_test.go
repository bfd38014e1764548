package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

var helpHint = regexp.MustCompile(`\(sosappliance((?: [^()]*)?) --help lists`)

// TestFlagHintNamesARealCommand: suggestFlag (69d64ea) ends an
// unknown flag's error with "(sosappliance NAME --help lists ...)", NAME
// being cmd.Name(). On the root command that is "sosappliance
// sosappliance --help", which is itself an error (unknown command
// "sosappliance"). Each hint must name a command that prints its help.
// Fails on 79d1aff for "--vrsion"; holds for subcommands. Found by
// review (helper-87).
func TestFlagHintNamesARealCommand(t *testing.T) {
	for _, args := range [][]string{{"--vrsion"}, {"plan", "--xyzzy"}, {"validate", "--jsn"}, {"rollback", "--auto-aprove"}} {
		code, _, errOut := runCLI(t, args...)
		m := helpHint.FindStringSubmatch(errOut)
		if code == 0 || m == nil {
			t.Errorf("%s: exit %d, no help hint:\n%s", strings.Join(args, " "), code, errOut)
			continue
		}
		helpArgs := append(strings.Fields(m[1]), "--help")
		if hcode, _, herr := runCLI(t, helpArgs...); hcode != 0 {
			t.Errorf("%s: the hint says run sosappliance %s, which fails (exit %d): %s", strings.Join(args, " "), strings.Join(helpArgs, " "), hcode, strings.TrimSpace(herr))
		}
	}
}

// TestSingleDashTypoSuggested: single-dash long flags are
// documented and accepted (normalizeArgs: -json, -out=FILE,
// -auto-approve, -node), but a typo of one ("-nod", "-auto-aprove")
// reaches pflag as shorthands and gets "unknown shorthand flag: 'n' in
// -nod" with no nearest flag, although 69d64ea says a mistyped flag now
// gets one. Fails on 79d1aff. Found by review (helper-87).
func TestSingleDashTypoSuggested(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"plan", "-nod", "agent-east"}, "node"},
		{[]string{"apply", "-auto-aprove"}, "auto-approve"},
		{[]string{"validate", "-jsn"}, "json"},
	} {
		code, out, errOut := runCLI(t, c.args...)
		if code == 0 || !strings.Contains(errOut, "did you mean -"+c.want) && !strings.Contains(errOut, "did you mean --"+c.want) {
			t.Errorf("%s: exit %d, want a did-you-mean of %s:\n%s%s", strings.Join(c.args, " "), code, c.want, out, errOut)
		}
	}
}

// TestValidateJSONOddFiles: validate --json (e89b711) on files
// that are not a config (empty, not UTF-8, NUL bytes, a directory,
// /dev/null, missing, past the size limit), a file just under the size
// limit, one with warnings only, and labels full of quotes, backslashes,
// control characters, U+2028 and HTML: stdout is exactly one JSON
// document; valid is error_count == 0; the counts match the diagnostics;
// the exit status is 0 exactly when valid; hostile strings come back
// intact. Written by review (helper-87); it passed.
func TestValidateJSONOddFiles(t *testing.T) {
	dir := t.TempDir()
	src, err := os.ReadFile("../../examples/minimal.hcl")
	testsupport.RequireNoError(t, err)
	min := string(src)
	noPorts := strings.Replace(min, `  server_ports = ["5201-5204"] # iperf3 servers on four ports`+"\n", "", 1)
	hostile := "a\"b\\c\x1b[31m\u2028</script>&<x>"
	// HCL's own escapes: \" \\ \uNNNN.
	hostileHCL := `"a\"b\\c\u001b[31m\u2028</script>&<x>"`
	files := map[string]string{
		"empty":        "",
		"blank":        " \n\t\n",
		"latin1":       "security { psk_file = \"/p\xe9\" }\n",
		"nul":          min + "\x00",
		"too large":    min + strings.Repeat("#", 1<<20),
		"under limit":  min + strings.Repeat("# padding\n", (1<<20-len(min))/10-1),
		"warning only": noPorts,
		"hostile pool": min + "\npool " + hostileHCL + " {}\n",
		"hostile wl":   strings.Replace(noPorts, `whitelist "bulk"`, "whitelist "+hostileHCL, 1),
	}
	paths := map[string]string{"directory": dir, "/dev/null": "/dev/null", "missing": filepath.Join(dir, "missing.hcl")}
	for name, content := range files {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".hcl")
		writeConfig(t, p, content)
		paths[name] = p
	}
	for name, p := range paths {
		code, out, errOut := runCLI(t, "validate", "--json", "-c", p)
		dec := json.NewDecoder(strings.NewReader(out))
		var r struct {
			Path        string
			Valid       bool
			Errors      int `json:"error_count"`
			Warnings    int `json:"warning_count"`
			Diagnostics []struct{ Severity, Summary, Detail string }
			Whitelists  []struct{ Name string }
		}
		if err := dec.Decode(&r); err != nil {
			t.Errorf("%s: stdout is not JSON (%v):\n%s\nstderr: %s", name, err, out, errOut)
			continue
		}
		if dec.More() {
			t.Errorf("%s: more than one JSON document on stdout:\n%s", name, out)
		}
		var e, w int
		text := ""
		for _, d := range r.Diagnostics {
			switch d.Severity {
			case "error":
				e++
			case "warning":
				w++
			default:
				t.Errorf("%s: severity %q", name, d.Severity)
			}
			text += d.Summary + "\n" + d.Detail + "\n"
		}
		if e != r.Errors || w != r.Warnings || r.Valid != (e == 0) || (code == 0) != r.Valid || r.Path != p {
			t.Errorf("%s: exit %d, report %+v: counts, valid, exit or path disagree", name, code, r)
		}
		// Summaries quote names as Go does (%q): the label comes back
		// quoted, its escape character as \x1b, not raw.
		if strings.HasPrefix(name, "hostile") && !strings.Contains(text, strconv.Quote(hostile)) {
			t.Errorf("%s: the label does not come back quoted:\n%s", name, text)
		}
		if name == "hostile wl" && (len(r.Whitelists) != 1 || r.Whitelists[0].Name != hostile) {
			t.Errorf("%s: whitelists %+v, want the one named %q", name, r.Whitelists, hostile)
		}
		t.Logf("%s: exit %d valid=%v errors=%d warnings=%d first=%q", name, code, r.Valid, r.Errors, r.Warnings, firstSummary(text))
	}
}

func firstSummary(s string) string {
	first, _, _ := strings.Cut(s, "\n")
	return first
}

// TestValidateTextUnchanged: e89b711 rebuilt validate's text on
// a report; its text must be what e356703 printed for the same file. The
// want below is e356703's output (built and run by helper-87) for a file
// with a warning of the file's, a world-writable mode, a node whose
// tunings disagree and an unknown --node with nothing near. Written by
// review (helper-87); it passed. The mode's fix has since changed on
// purpose (a new file, not a chmod: helper-89).
func TestValidateTextUnchanged(t *testing.T) {
	src, err := os.ReadFile("../../examples/minimal.hcl")
	testsupport.RequireNoError(t, err)
	s := strings.Replace(string(src), `  server_ports = ["5201-5204"] # iperf3 servers on four ports`+"\n", "", 1) + `
tuning "t1" { sysctl = { "net.core.somaxconn" = "1024" } }
tuning "t2" { sysctl = { "net.core.somaxconn" = "2048" } }
node "agent-east" { tuning = ["t1", "t2"] }
`
	p := filepath.Join(t.TempDir(), "mix.hcl")
	writeConfig(t, p, s)
	testsupport.RequireNoError(t, os.Chmod(p, 0o666))
	code, out, errOut := runCLI(t, "validate", "-c", p, "--node", "nosuch")
	want := strings.ReplaceAll(`PATH:42:1: warning: Whitelist "bulk" lists no ports: it carries TCP on every port between its clients and servers
    | whitelist "bulk" {
    hint: Name the listening ports with server_ports = ["5201", "50000-51000"] unless every connection between these hosts should cross the agents.
warning: config file PATH is writable by every user (mode 0666): sosappliance acts on this file as root, so only root may change it; a chmod or chown leaves in a writer that holds it open, so replace it with a new file of root's, after reading it (install -m 0644 -o root -g root PATH PATH.new && mv PATH.new PATH); apply and run refuse it
PATH: node agent-east: error: sysctl net.core.somaxconn is "1024" in tuning "t1" (node agent-east) at PATH:47:26 but "2048" in tuning "t2" (node agent-east) at PATH:48:26; one node takes one value: set it in one tuning, or the same in both
PATH: node nosuch: error: node "nosuch" has no role in the configuration (known nodes: agent-east, agent-west, ctl); pass --node
sosappliance: PATH: 2 problem(s)
`, "PATH", p)
	if code != 1 || out != "" || errOut != want {
		t.Errorf("exit %d, stdout %q, stderr:\n%s\nwant exit 1 and stderr:\n%s", code, out, errOut, want)
	}
}

// TestValidateJSONValidNoWhitelists: a valid file with no
// whitelist block gets text "0 whitelist(s)", but in validate --json
// (e89b711) the "whitelists" key is absent (omitempty on a nil slice), the
// same as for an invalid file, so a consumer cannot tell "valid, none" by
// the key and a strict schema check of a valid report fails. Fails on
// 79d1aff. Found by review (helper-87).
func TestValidateJSONValidNoWhitelists(t *testing.T) {
	src, err := os.ReadFile("../../examples/minimal.hcl")
	testsupport.RequireNoError(t, err)
	s := string(src)
	s = s[:strings.Index(s, `whitelist "bulk"`)]
	p := filepath.Join(t.TempDir(), "nowl.hcl")
	writeConfig(t, p, s)
	code, out, errOut := runCLI(t, "validate", "--json", "-c", p)
	var r map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != 0 {
		t.Fatalf("exit %d, %v:\n%s%s", code, err, out, errOut)
	}
	if w, ok := r["whitelists"]; !ok || string(w) != "[]" {
		t.Errorf("a valid file with no whitelists: \"whitelists\" is %q (present: %v), want []:\n%s", w, ok, out)
	}
}
