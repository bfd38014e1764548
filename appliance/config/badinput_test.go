package config

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
)

// twoSitesWith is a valid two-site file; %s is spliced in at the end of
// site "a" (inside it) and %s at the end of the file.
const twoSitesWith = `security { psk_file = "/etc/sosappliance/psk" }
controller { node = "ctl" }
site "a" {
  prefixes = ["10.1.0.0/24"]
  switch "sa" { datapath_id = "00:00:00:00:00:00:0a:01" }
  agent "a1" {
    node        = "host-a1"
    switch      = "sa"
    switch_port = 2
    mac         = "02:00:00:00:0a:02"
    address     = "10.1.0.2"
    interface   = "eth1"
%s
  }
}
site "b" {
  prefixes = ["10.2.0.0/24"]
  switch "sb" { datapath_id = "00:00:00:00:00:00:0b:01" }
  agent "b1" {
    node        = "host-b1"
    switch      = "sb"
    switch_port = 2
    mac         = "02:00:00:00:0b:02"
    address     = "10.2.0.2"
    interface   = "eth1"
  }
}
%s
`

// loadFileOf writes src to a temp sos.hcl and runs the real LoadFile on it,
// turning a panic into a test failure that shows where it came from.
func loadFileOf(t *testing.T, src string) (cfg *Config, path string, diags hcl.Diagnostics, text string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "sos.hcl")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("LoadFile panicked on a bad file: %v\n%s", r, firstLines(string(debug.Stack()), 24))
			}
		}()
		var s Source
		cfg, s, diags = LoadFile(path)
		var b bytes.Buffer
		WriteDiagnostics(&b, diags, s.Bytes)
		text = b.String()
	}()
	return cfg, path, diags, text
}

func firstLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}

// TestClientAgentsUnknownWhileClientsInNoSite: a whitelist whose
// clients lie in no site (a typo in a prefix) and whose client_agents name
// agents that do not exist. resolveWhitelist returns before pickAgents, so
// the names stay unresolved. Before, validate's spread check dereferenced
// cfg.Agent(name) == nil and the loader panicked (and with it `validate`,
// `status -c` and a running daemon's reload); now the whitelist's problem
// is reported with its position. Found by review (helper-58).
func TestClientAgentsUnknownWhileClientsInNoSite(t *testing.T) {
	src := fmt.Sprintf(twoSitesWith, "", `
whitelist "w" {
  clients       = ["10.9.0.0/24"]
  client_agents = ["a1x", "a2x"]
  server        = "10.2.0.10"
  server_port   = 5201
}
`)
	_, _, diags, text := loadFileOf(t, src)
	if !diags.HasErrors() {
		t.Fatalf("accepted:\n%s", text)
	}
	t.Logf("diagnostics:\n%s", text)
}

// TestClientAgentsWithIncompleteSite: the same panic through the
// other early return: a site prefix with a typo (site incomplete) and a
// typo in one client_agents name. Found by review (helper-58).
func TestClientAgentsWithIncompleteSite(t *testing.T) {
	src := strings.Replace(fmt.Sprintf(twoSitesWith, "", `
whitelist "w" {
  clients       = ["10.1.0.0/24"]
  client_agents = ["a1", "a9"]
  server        = "10.2.0.10"
  server_port   = 5201
}
`), `prefixes = ["10.2.0.0/24"]`, `prefixes = ["10.2.0.0/33"]`, 1)
	_, _, diags, text := loadFileOf(t, src)
	if !diags.HasErrors() {
		t.Fatalf("accepted:\n%s", text)
	}
	t.Logf("diagnostics:\n%s", text)
}

// TestOddInputsDoNotPanic runs the loader over odd inputs; each
// must come back with diagnostics that carry a position in the file.
// "mixed family" and "same site" panicked as
// TestClientAgentsUnknownWhileClientsInNoSite did. Written by review
// (helper-58).
func TestOddInputsDoNotPanic(t *testing.T) {
	cases := map[string]string{
		"empty":            "",
		"only comments":    "# nothing\n// here\n",
		"bom":              "\ufeff" + fmt.Sprintf(twoSitesWith, "", ""),
		"empty blocks":     "security {}\nsite \"a\" {}\nwhitelist \"w\" {}\ntuning \"t\" {}\nnode \"n\" {}\npool \"p\" {}\nlimits {}\ndaemon {}\nspread {}\ncluster {}\ncontroller {}\n",
		"huge numbers":     fmt.Sprintf(twoSitesWith, "    switch_port = 1e400", "limits { max_sessions = 99999999999999999999999999999\n memory = 1e400 }"),
		"negative":         fmt.Sprintf(twoSitesWith, "", "limits { max_sessions = -1\n session_memory = \"-1KiB\"\n stall_timeout = \"-5s\" }\ndaemon { drift_interval = \"-1s\" }"),
		"zero durations":   fmt.Sprintf(twoSitesWith, "", "daemon { drift_interval = \"0s\"\n shutdown_timeout = \"0\" }"),
		"unicode labels":   fmt.Sprintf(twoSitesWith, "", "whitelist \"wé\u200b\" {\n clients = [\"10.1.0.0/24\"]\n server = \"10.2.0.1\"\n server_port = 1\n}"),
		"null values":      fmt.Sprintf(twoSitesWith, "", "whitelist \"w\" {\n clients = [null]\n server = null\n server_port = null\n}"),
		"object for list":  fmt.Sprintf(twoSitesWith, "", "whitelist \"w\" {\n clients = {a = 1}\n server = \"10.2.0.1\"\n server_ports = [1, [2]]\n}"),
		"sysctl not a map": fmt.Sprintf(twoSitesWith, "", "tuning \"t\" { sysctl = [\"a\"] }"),
		"sysctl odd keys":  fmt.Sprintf(twoSitesWith, "", "tuning \"t\" {\n sysctl = { (\"a.b\") = \"1\", \"x.y\" = null, \"c.d\" = [1] }\n}"),
		"dup labels":       fmt.Sprintf(twoSitesWith, "", "site \"a\" { prefixes = [\"10.3.0.0/24\"] }\nwhitelist \"w\" {\n clients = [\"10.1.0.0/24\"]\n server = \"10.2.0.1\"\n}\nwhitelist \"w\" {\n clients = [\"10.1.0.0/24\"]\n server = \"10.2.0.1\"\n}"),
		"missing label":    "security { psk_file = \"/p\" }\nsite { prefixes = [] }\n",
		"two labels":       "security { psk_file = \"/p\" }\nsite \"a\" \"b\" { prefixes = [] }\n",
		"template":         fmt.Sprintf(twoSitesWith, "", "whitelist \"w\" {\n clients = [\"${x}\"]\n server = \"10.2.0.1\"\n}"),
		"funcs":            fmt.Sprintf(twoSitesWith, "", "whitelist \"w\" {\n clients = [upper(\"x\")]\n server = \"10.2.0.1\"\n}"),
		"for expr":         fmt.Sprintf(twoSitesWith, "", "whitelist \"w\" {\n clients = [for x in [\"10.1.0.0/24\"]: x]\n server = \"10.2.0.1\"\n}"),
		"client_agents x":  fmt.Sprintf(twoSitesWith, "", "whitelist \"w\" {\n clients = [\"10.1.0.0/24\", \"10.2.0.0/24\"]\n client_agents = [\"q\", \"r\"]\n server = \"10.2.0.1\"\n}"),
		"mixed family":     fmt.Sprintf(twoSitesWith, "", "whitelist \"w\" {\n clients = [\"2001:db8::/64\"]\n server_agents = [\"zz\", \"yy\"]\n server = \"10.2.0.1\"\n}"),
		"same site":        fmt.Sprintf(twoSitesWith, "", "whitelist \"w\" {\n clients = [\"10.1.0.0/25\"]\n server_agents = [\"zz\", \"yy\"]\n server = \"10.1.0.200\"\n}"),
	}
	for name, src := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "sos.hcl")
			if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			var diags hcl.Diagnostics
			var text string
			panicked := func() (p any) {
				defer func() { p = recover() }()
				var s Source
				_, s, diags = LoadFile(path)
				var b bytes.Buffer
				WriteDiagnostics(&b, diags, s.Bytes)
				text = b.String()
				return nil
			}()
			if panicked != nil {
				t.Fatalf("panic: %v", panicked)
			}
			for _, d := range diags {
				if d.Subject == nil || d.Subject.Filename != path || d.Subject.Start.Line < 1 {
					t.Errorf("diagnostic without a position in %s: %q (subject %v)", path, d.Summary, d.Subject)
				}
			}
			// A BOM, a for expression and a unicode whitelist name are
			// fine HCL; every other case is a mistake.
			if name != "bom" && name != "for expr" && name != "unicode labels" && !diags.HasErrors() {
				t.Errorf("accepted:\n%s", src)
			}
			t.Logf("%s", text)
		})
	}
}

// TestTooDeepRefusedAtItsPosition: each way the HCL parser recurses per
// level, 100,000 levels deep (brackets overflowed the stack at 100,000,
// unary operators and conditionals at a million), is refused before the
// parse, at the position where the limit passed; a file near the limits
// but within them parses on.
func TestTooDeepRefusedAtItsPosition(t *testing.T) {
	const n = 100000
	for name, c := range map[string]struct {
		src  string
		line int
	}{
		"brackets":     {"security { psk_file = \"/p\" }\nx = " + strings.Repeat("[", n) + strings.Repeat("]", n) + "\n", 2},
		"parentheses":  {"\n\nx = " + strings.Repeat("(", n) + "1" + strings.Repeat(")", n) + "\n", 3},
		"not":          {"x = " + strings.Repeat("! ", n) + "true\n", 1},
		"negation":     {"x = " + strings.Repeat("-", n) + "1\n", 1},
		"conditionals": {"x = " + strings.Repeat("a ? b : ", n) + "c\n", 1},
		"in a string":  {"x = \"${" + strings.Repeat("[", n) + "}\"\n", 1},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, diags, text := loadFileOf(t, c.src)
			if len(diags) != 1 || diags[0].Summary != "Config file nests too deep" || diags[0].Subject.Start.Line != c.line {
				t.Fatalf("want one refusal at line %d:\n%s", c.line, headOf(text))
			}
			t.Logf("%s", headOf(text))
		})
	}
	within := "x = " + strings.Repeat("[", maxNesting) + strings.Repeat("]", maxNesting) + "\ny = " +
		strings.Repeat("!", maxUnary) + "true\n"
	_, _, diags, text := loadFileOf(t, within)
	for _, d := range diags {
		if d.Summary == "Config file nests too deep" {
			t.Errorf("a file within the limits refused:\n%s", headOf(text))
		}
	}
}

func headOf(s string) string { return firstLines(s, 4) }

// TestRelayPortClashPosition: relay_port equal to the default
// data_port, with data_port left out. Before, the clash was reported
// against the absent data_port: ":0:0: error". Now it points at
// relay_port. Found by review (helper-58).
func TestRelayPortClashPosition(t *testing.T) {
	src := fmt.Sprintf(twoSitesWith, "    relay_port  = 9877", "")
	_, path, diags, text := loadFileOf(t, src)
	if !diags.HasErrors() {
		t.Fatalf("accepted")
	}
	for _, d := range diags {
		if strings.Contains(d.Summary, "data_port and relay_port") {
			if d.Subject == nil || d.Subject.Filename != path || d.Subject.Start.Line != 13 {
				t.Errorf("the clash must point at relay_port, %s:13; got:\n%s", path, text)
			}
			return
		}
	}
	t.Fatalf("no clash diagnostic:\n%s", text)
}

// TestWrongTypeReportedOnce: one wrong-typed argument is one problem.
// Before, state_path, control_socket and the tls files were read twice
// (once for the value, once for the absolute-path check), and each read
// reported the type. Now an argument reported once is not read again
// (attrs.bad). Found by review (helper-58).
func TestWrongTypeReportedOnce(t *testing.T) {
	for name, extra := range map[string]string{
		"state_path": `daemon { state_path = ["/var/lib/sosappliance/state.db"] }`,
		"cert_file":  "controller {\n  node = \"ctl\"\n  tls {\n    cert_file = [\"/x\"]\n    key_file = \"/k\"\n    ca_file = \"/c\"\n  }\n}",
	} {
		src := fmt.Sprintf(twoSitesWith, "", extra)
		if name == "cert_file" {
			src = strings.Replace(src, `controller { node = "ctl" }`, "", 1)
		}
		_, _, diags, text := loadFileOf(t, src)
		n := 0
		for _, d := range diags {
			if strings.Contains(d.Summary, name) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s of a wrong type gives %d diagnostics, want 1:\n%s", name, n, text)
		}
	}
}

// TestHealthListenIsAnAddress: before, validate accepted a health_listen
// of "localhost:PORT" or ":PORT", which desired.Compile then refused at
// plan and run with no file:line (the controller probes it, so it is an
// address). Now validate refuses it at its line; "IP:PORT" passes. Found
// by review (helper-58).
func TestHealthListenIsAnAddress(t *testing.T) {
	for _, v := range []string{"localhost:9878", ":9878", "0.0.0.0:9878"} {
		src := fmt.Sprintf(twoSitesWith, fmt.Sprintf("    health_listen = %q", v), "")
		_, _, diags, text := loadFileOf(t, src)
		t.Logf("health_listen = %q:\n%s", v, headOf(text))
		if refused := diags.HasErrors(); refused != (v != "0.0.0.0:9878") || refused && diags[0].Subject.Start.Line != 13 {
			t.Errorf("health_listen = %q: refused %v:\n%s", v, refused, text)
		}
	}
}

// TestEmptyAgentName: before, agent "" passed validate (the handshake
// identity check only bounded the length from above), while the relay
// refused an empty name when the daemon built it. Found by review
// (helper-58).
func TestEmptyAgentName(t *testing.T) {
	src := strings.Replace(fmt.Sprintf(twoSitesWith, "", ""), `agent "b1"`, `agent ""`, 1)
	_, _, diags, text := loadFileOf(t, src)
	if !diags.HasErrors() || !strings.Contains(text, `Agent name "" is not a valid handshake identity`) {
		t.Errorf("agent \"\" not refused by validate:\n%s", text)
	}
}

// TestSpecialPaths: a directory, a dangling symlink and /dev/null as the
// config (a mode-000 file is not tested: root reads anything). Before,
// the hint for /dev/null said "is a Dc---------". Found by review
// (helper-58).
func TestSpecialPaths(t *testing.T) {
	dir := t.TempDir()
	dangling := filepath.Join(dir, "dangling.hcl")
	if err := os.Symlink(filepath.Join(dir, "gone"), dangling); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, dangling, "/dev/null", "/dev/zero"} {
		_, src, diags := LoadFile(p)
		var b bytes.Buffer
		WriteDiagnostics(&b, diags, src.Bytes)
		if !diags.HasErrors() {
			t.Errorf("%s accepted", p)
		}
		for _, d := range diags {
			if d.Subject == nil || d.Subject.Filename != p {
				t.Errorf("%s: diagnostic without the path: %q", p, d.Summary)
			}
		}
		if strings.Contains(b.String(), "---------") || strings.HasPrefix(p, "/dev/") && !strings.Contains(b.String(), "is a character device") {
			t.Errorf("%s: the hint shows a raw mode string instead of saying what the path is:\n%s", p, b.String())
		}
		t.Logf("%s:\n%s", p, b.String())
	}
}

// TestLongLineQuoted: a diagnostic on a long line that holds multi-byte
// characters around column 200 still quotes the line. Before, the cut at
// byte 200 split a character, and the line, no longer valid UTF-8, was
// not quoted. Found by review (helper-58).
func TestLongLineQuoted(t *testing.T) {
	pad := strings.Repeat("é", 120) // 240 bytes
	src := fmt.Sprintf(twoSitesWith, "", "whitelist \"w\" { clients = [\"bad\"] } # x"+pad)
	_, _, _, text := loadFileOf(t, src)
	if !strings.Contains(text, "    | whitelist \"w\"") {
		t.Errorf("the offending line is not quoted:\n%s", text)
	}
}

// TestBadClientOneProblem: one bad client prefix is one problem. Before,
// resolveWhitelist added "has no clients" on top of the decode error.
// Found by review (helper-58).
func TestBadClientOneProblem(t *testing.T) {
	src := fmt.Sprintf(twoSitesWith, "", "whitelist \"w\" {\n  clients = [\"10.1.0.0/244\"]\n  server = \"10.2.0.1\"\n  server_port = 1\n}")
	_, _, diags, text := loadFileOf(t, src)
	if n := len(diags.Errs()); n != 1 {
		t.Errorf("one typo in clients gives %d errors, want 1:\n%s", n, text)
	}
}

// TestIntervalsBounded: a keepalive, health interval or drift interval
// so short that its work never stops (1ns: an echo to every switch
// without end, a convergence without pause), and any duration so long
// that twice it overflows (a keepalive's dead-peer time), are refused at
// their line. Before, any positive duration passed. Noticed by review
// (helper-58).
func TestIntervalsBounded(t *testing.T) {
	for _, c := range []struct{ block, says string }{
		{"controller {\n node = \"ctl\"\n keepalive = \"1ns\"\n}", "keepalive 1ns is shorter than 100ms"},
		{"controller {\n node = \"ctl\"\n health_interval = \"10ms\"\n}", "health_interval 10ms is shorter than 100ms"},
		{`daemon { drift_interval = "1ns" }`, "drift_interval 1ns is shorter than 1s"},
		{"controller {\n node = \"ctl\"\n keepalive = \"2000000h\"\n}", "keepalive 2000000h0m0s is longer than 720h0m0s"},
		{`limits { stall_timeout = "9999h" }`, "stall_timeout 9999h0m0s is longer than 720h0m0s"},
	} {
		src := fmt.Sprintf(twoSitesWith, "", c.block)
		if strings.HasPrefix(c.block, "controller") {
			src = strings.Replace(src, `controller { node = "ctl" }`, "", 1)
		}
		_, _, diags, text := loadFileOf(t, src)
		if len(diags.Errs()) != 1 || !strings.Contains(diags[0].Summary, c.says) || diags[0].Subject.Start.Line < 2 {
			t.Errorf("%s: want one refusal saying %q:\n%s", c.block, c.says, text)
		}
	}
}

// TestTooDeepCountsAsTheParserSees: the first tooDeep counted characters.
// A closer inside a string or a comment took a level off its count, and
// a comment between unary operators ended their run, though the parser
// sees neither: `["]", ["]", ...` nesting 100,000 deep, or 1.4 million
// "-" each followed by a comment, still reached the recursive parser and
// ended the process in a stack overflow (a running daemon on its reload:
// TestRunSurvivesNestingPastTheCount). And a banner of dashes in a
// comment was refused as a run of operators. tooDeep now counts the
// lexer's tokens. (Smaller files here: past the limits is enough.) Found
// by review (helper-60).
func TestTooDeepCountsAsTheParserSees(t *testing.T) {
	for name, src := range map[string]string{
		"closer in a string":      "x = " + strings.Repeat(`["]",`, 1000) + "1" + strings.Repeat("]", 1000) + "\n",
		"closer in a comment":     "x = " + strings.Repeat("[/*]*/", 1000) + "1" + strings.Repeat("]", 1000) + "\n",
		"unary split by comments": "x = (" + strings.Repeat("-#\n", 5000) + "1)\n",
	} {
		t.Run(name, func(t *testing.T) {
			_, _, diags, text := loadFileOf(t, src)
			if len(diags) != 1 || diags[0].Summary != "Config file nests too deep" {
				t.Fatalf("not refused before the parse:\n%s", headOf(text))
			}
			t.Logf("%s", headOf(text))
		})
	}
	banner := "/*\n" + strings.Repeat(strings.Repeat("-", 70)+"\n", 60) + "*/\n"
	_, _, diags, text := loadFileOf(t, banner+fmt.Sprintf(twoSitesWith, "", ""))
	if diags.HasErrors() {
		t.Errorf("a valid file with a comment banner of dashes refused:\n%s", headOf(text))
	}
}

// TestWrongTypeReportedOnceMore: several decoders read an argument as a
// string (reported: not a string), got the default "" back and parsed
// that, reporting the same argument a second time ("empty CPU list", "not
// a MAC"). They now parse only a value the file gives as a string
// (attrs.given). Found by review (helper-60).
func TestWrongTypeReportedOnceMore(t *testing.T) {
	cases := map[string]struct{ agent, extra string }{
		"relay_cpus list":  {"    tuning = [\"t\"]", "tuning \"t\" { relay_cpus = [13] }"},
		"irq_cpus list":    {"    tuning = [\"t\"]", "tuning \"t\" {\n interface \"eth1\" { irq_cpus = [3] }\n}"},
		"mac list":         {"", ""},
		"datapath_id list": {"", "site \"c\" {\n prefixes = [\"10.3.0.0/24\"]\n switch \"sc\" { datapath_id = [1] }\n}"},
		"public_key list":  {"    public_key = [5]", ""},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			src := fmt.Sprintf(twoSitesWith, c.agent, c.extra)
			if name == "mac list" {
				src = fmt.Sprintf(twoSitesWith, "", "")
				src = strings.Replace(src, `mac         = "02:00:00:00:0a:02"`, `mac         = [2]`, 1)
			}
			_, _, diags, text := loadFileOf(t, src)
			perLine := map[int]int{}
			for _, d := range diags {
				if d.Subject != nil {
					perLine[d.Subject.Start.Line]++
				}
			}
			for line, n := range perLine {
				if n > 1 {
					t.Errorf("line %d reported %d times:\n%s", line, n, text)
				}
			}
			if len(diags) == 0 {
				t.Errorf("accepted")
			}
		})
	}
}

// TestLegitTemplatesNotTooDeep: heredocs, %{ if } / %{ for }
// directives, strip markers, negative numbers, '?' in strings and a
// PEM banner of dashes in a heredoc are no nesting. Written by review
// (helper-61); it passed.
func TestLegitTemplatesNotTooDeep(t *testing.T) {
	var wl strings.Builder
	for i := range 20000 {
		fmt.Fprintf(&wl, "  \"10.%d.%d.0/24\", # client? %d ?\n", i/256%256, i%256, i)
	}
	cases := map[string]string{
		"heredoc with directives": "x = <<EOT\n%{ for a in b ~}\n${a}%{ if a == 1 }one%{ else }${ \"${a}\" }%{ endif }\n%{~ endfor }\nEOT\n",
		"indented heredoc pem":    "k = <<-EOT\n  -----BEGIN PUBLIC KEY-----\n  " + strings.Repeat("-", 9000) + "\n  -----END PUBLIC KEY-----\n  EOT\n",
		"negatives":               "n = [" + strings.Repeat("-1, -2, - 3,\n", 20000) + "]\n",
		"many ? in strings":       "w = [\n" + wl.String() + "]\n",
		"many closed interps":     "s = \"" + strings.Repeat("${a}%{if b}c%{endif}", 20000) + "\"\n",
		"unclosed heredoc":        "x = <<EOT\n${a}\n",
	}
	for name, src := range cases {
		if d := tooDeep(Source{Filename: "sos.hcl", Bytes: []byte(src)}); d != nil && name != "unclosed heredoc" {
			t.Errorf("%s: refused: %s: %s", name, d.Subject, d.Detail)
		}
	}
}

// TestLongBinaryChainRefused: "1+1+...+1" nests no bracket, but the
// parser builds a left-deep tree of one BinaryOpExpr per '+', and
// evaluating it recurses once per operator. Before, a MaxFileSize file of
// one such argument ended the process in a stack overflow; now more than
// maxChain operators, indexes or attributes chained in one argument are
// refused. Run in a child: a stack overflow is fatal. Found by review
// (helper-61).
func TestLongBinaryChainRefused(t *testing.T) {
	n := (MaxFileSize - len(twoSitesWith) - 200) / 2
	src := fmt.Sprintf(twoSitesWith, "    switch_port = 1"+strings.Repeat("+1", n), "")
	src = strings.Replace(src, "    switch_port = 2\n", "", 1)
	if dir := os.Getenv("CHAIN_CHILD_DIR"); dir != "" {
		// The parent's temp directory: a stack overflow skips every
		// cleanup of the child.
		path := filepath.Join(dir, "sos.hcl")
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		_, _, diags := LoadFile(path)
		for _, d := range diags {
			t.Logf("loaded: %s", d.Summary)
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestLongBinaryChainRefused$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "CHAIN_CHILD_DIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "loaded: Config file nests too deep") {
		t.Errorf("LoadFile of a %d KiB file with %d '+' in one expression: child %v:\n%s", len(src)>>10, n, err, firstLines(string(out), 12))
		return
	}
	t.Logf("child:\n%s", firstLines(string(out), 12))
}

// TestChainCountsPerExpression: the first chain count reset only at a
// newline outside brackets, and every argument sits in a block: 4,200
// sysctl values of two operators each, or agent blocks of one, were
// refused as one chain. It counts per expression now (a ',', '=' or ':'
// ends one, as a newline in a body). Found by review (helper-62).
func TestChainCountsPerExpression(t *testing.T) {
	var sysctl, agents, list strings.Builder
	for i := range 2100 {
		fmt.Fprintf(&sysctl, "    \"net.core.k%d\" = 64 * 1024 * 1024\n", i)
	}
	for i := range 4200 {
		fmt.Fprintf(&agents, "  agent \"a%d\" {\n    switch_port = %d + 1\n  }\n", i, i)
		fmt.Fprintf(&list, "%d * 2, ", i)
	}
	var ports strings.Builder
	for i := range 4200 {
		fmt.Fprintf(&ports, "  x%d = %d - 1\n", i, i)
	}
	cases := map[string]string{
		"sysctl map, 2 operators per value":    "tuning \"t\" {\n  sysctl = {\n" + sysctl.String() + "  }\n}\n",
		"agent blocks, 1 operator per block":   "site \"s\" {\n" + agents.String() + "}\n",
		"list on one line, 1 operator each":    "tuning \"t\" {\n  relay_cpus = [" + list.String() + "]\n}\n",
		"one block, 4200 arguments of one '-'": "daemon {\n" + ports.String() + "}\n",
	}
	for name, src := range cases {
		if d := tooDeep(Source{Filename: "sos.hcl", Bytes: []byte(src)}); d != nil {
			t.Errorf("%s (%d KiB): refused: %s: %s", name, len(src)>>10, d.Subject, d.Detail)
		}
	}
}

// TestLegitTextNotChained: heredocs of operators, strings of thousands
// of interpolations, 20,000 prefixes on one line, a for expression: no
// chain. Written by review (helper-62); it passed.
func TestLegitTextNotChained(t *testing.T) {
	var cidrs strings.Builder
	for i := range 20000 {
		fmt.Fprintf(&cidrs, "\"10.%d.%d.0/24\", ", i/256%256, i%256)
	}
	cases := map[string]string{
		"heredoc of + . [":       "x {\n  k = <<EOT\n" + strings.Repeat("a+b.c[d] - e.f[0] ", 20000) + "\nEOT\n}\n",
		"template interps":       "x {\n  s = \"" + strings.Repeat("${1}.${\"a\"}[", 20000) + "\"\n}\n",
		"cidrs on one line":      "x {\n  clients = [" + cidrs.String() + "]\n}\n",
		"for expression":         "x {\n  l = [for i in [" + strings.Repeat("1, ", 5000) + "] : \"10.0.${i}.0/24\" if i != 0]\n}\n",
		"pem heredoc in a block": "x {\n  k = <<-EOT\n  -----BEGIN-----\n  " + strings.Repeat("ab+/.", 20000) + "\n  -----END-----\n  EOT\n}\n",
	}
	for name, src := range cases {
		if d := tooDeep(Source{Filename: "sos.hcl", Bytes: []byte(src)}); d != nil {
			t.Errorf("%s: refused: %s: %s", name, d.Subject, d.Detail)
		}
	}
}

// nestedChains builds one expression that stays within every tooDeep
// limit per level (at most maxUnary '-' in a row, at most maxChain
// operators per expression) but repeats that across nested parentheses:
// level k is  -…-( <level k+1> ) +1+1…+1. Evaluation recurses once per
// unary operator and once per binary operator along the left spine, so
// the depth is the sum over all levels, not the per-level cap.
func nestedChains(levels, unary, chain int) string {
	var b strings.Builder
	for range levels {
		b.WriteString(strings.Repeat("-", unary))
		b.WriteString("(")
	}
	b.WriteString("1")
	for range levels {
		b.WriteString(")")
		b.WriteString(strings.Repeat("+1", chain))
	}
	return b.String()
}

func nestedChainsFile(unary, budget int) (string, int) {
	levels := maxNesting - 3 // the agent's switch_port sits 2 braces deep
	if v := os.Getenv("NESTED_LEVELS"); v != "" {
		fmt.Sscan(v, &levels)
	}
	base := fmt.Sprintf(twoSitesWith, "", "")
	room := MaxFileSize - len(base) - 64 - levels*(unary+2)
	chain := min(maxChain, room/2/levels)
	if budget >= 0 {
		chain = min(chain, budget)
	}
	expr := nestedChains(levels, unary, chain)
	src := fmt.Sprintf(twoSitesWith, "    switch_port = "+expr, "")
	src = strings.Replace(src, "    switch_port = 2\n", "", 1)
	return src, levels * (unary + chain)
}

// TestNestedChainsWithinTheLimitsLoad: the worst file within tooDeep's
// limits, each of 125 nested parentheses holding a full run of unary
// operators and a full chain of binary ones, loads without overflowing
// the stack. Before, the limits were per level only (4,096 each), and
// such a file of 256 KiB (64 levels of 4,096 '-') ended the process; the
// limits are now low enough that their sum along the nesting is safe.
// Run in a child: a stack overflow is fatal. Found by review (helper-63).
func TestNestedChainsWithinTheLimitsLoad(t *testing.T) {
	for _, c := range []struct {
		name         string
		unary, chain int
	}{{"unary only", maxUnary, 0}, {"binary only", 0, -1}, {"unary and binary", maxUnary, -1}} {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			src, frames := nestedChainsFile(c.unary, c.chain)
			if os.Getenv("NESTED_CHILD") == c.name {
				// The parent's temp directory: a stack overflow skips
				// every cleanup of the child.
				path := filepath.Join(os.Getenv("NESTED_DIR"), "sos.hcl")
				if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
					t.Fatal(err)
				}
				_, _, diags := LoadFile(path)
				t.Logf("loaded: %d diagnostics", len(diags))
				return
			}
			if d := tooDeep(Source{Filename: "sos.hcl", Bytes: []byte(src)}); d != nil {
				t.Logf("tooDeep refuses it: %s", d.Detail)
				return
			}
			if len(src) > MaxFileSize {
				t.Fatalf("test file too large: %d", len(src))
			}
			cmd := exec.Command(os.Args[0], "-test.run=^TestNestedChainsWithinTheLimitsLoad$/^"+strings.ReplaceAll(c.name, " ", "_")+"$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), "NESTED_CHILD="+c.name, "NESTED_DIR="+t.TempDir())
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Errorf("LoadFile of a %d KiB file (tooDeep passes it; %d unary+binary operators nested along one spine): child %v:\n%s", len(src)>>10, frames, err, firstLines(string(out), 14))
				return
			}
			t.Logf("child ok (%d KiB, %d operators):\n%s", len(src)>>10, frames, firstLines(string(out), 8))
		})
	}
}

// TestSplatChainCounted: an attribute splat ends with '*', which
// operandEnd does not take for the end of an operand, so the '+' after
// "a.*" goes uncounted; but the '.' of each "a.*" follows an operand and
// is, and the chain is refused. Written by review (helper-63); it passed.
func TestSplatChainCounted(t *testing.T) {
	n := (MaxFileSize - len(twoSitesWith) - 200) / 4
	src := fmt.Sprintf(twoSitesWith, "    switch_port = 1"+strings.Repeat("+a.*", n), "")
	src = strings.Replace(src, "    switch_port = 2\n", "", 1)
	if os.Getenv("NESTED_CHILD") == "splat" {
		_, _, diags, text := loadFileOf(t, src)
		t.Logf("loaded: %d diagnostics\n%s", len(diags), headOf(text))
		return
	}
	if d := tooDeep(Source{Filename: "sos.hcl", Bytes: []byte(src)}); d != nil {
		t.Logf("tooDeep refuses it: %s", d.Detail)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSplatChainCounted$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "NESTED_CHILD=splat")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("LoadFile of a %d KiB file with %d '+' after \"a.*\" (tooDeep passes it): child %v:\n%s", len(src)>>10, n, err, firstLines(string(out), 8))
		return
	}
	t.Logf("child ok:\n%s", firstLines(string(out), 8))
}

// TestPortSpellingsExplained: the port spellings of other tools got
// "not a port or a range" with no more word: iptables' 5000:6000, a port
// past 65535, and a range given to server_port, which takes one port.
// Each now says what to write instead, at the argument. Found by review
// (helper-81).
func TestPortSpellingsExplained(t *testing.T) {
	for arg, want := range map[string]string{
		`server_ports = ["5000:6000"]`: `"5000:6000" is not a port or a range; did you mean 5000-6000?`,
		`server_ports = ["70000"]`:     `"70000" goes past 65535, the highest TCP port`,
		`server_port = "5201-5204"`:    `server_port is one port, not "5201-5204"`,
		`server_port = "5201,5202"`:    `write server_ports = ["5201", "5202"]`,
		`server_port = 70000`:          `server_port must be between 1 and 65535`,
	} {
		src := fmt.Sprintf(twoSitesWith, "", "whitelist \"w\" {\n  clients = [\"10.1.0.0/24\"]\n  server = \"10.2.0.9\"\n  "+arg+"\n}")
		_, _, diags, text := loadFileOf(t, src)
		if !diags.HasErrors() || !strings.Contains(text, want) || diags[0].Subject == nil || diags[0].Subject.Start.Line != 31 {
			t.Errorf("%s: want an error at line 31 that says %q:\n%s", arg, want, text)
		}
	}
	src := fmt.Sprintf(twoSitesWith, "", "whitelist \"w\" {\n  clients = [\"10.1.0.0/24\"]\n  server = \"10.2.0.9\"\n  server_port = \"5201\"\n}")
	if _, _, diags, text := loadFileOf(t, src); diags.HasErrors() {
		t.Errorf(`server_port = "5201" (one port, quoted) refused:\n%s`, text)
	}
}
