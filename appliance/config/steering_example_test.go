package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestSteeringExampleLineUncommented: sos.hcl.example shows the
// three steering arguments as one commented line; an operator who takes
// the comment marker off (as for public_key just above it) gets a file
// validate refused with "Missing newline after argument": HCL takes one
// argument per line. The example now shows three lines. Found by review
// (helper-80).
func TestSteeringExampleLineUncommented(t *testing.T) {
	b, err := os.ReadFile("../../sos.hcl.example")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	found := false
	for _, l := range strings.Split(string(b), "\n") {
		if s := strings.TrimSpace(l); strings.HasPrefix(s, "# steering_") {
			found = true
			l = strings.Replace(l, "# ", "", 1)
		}
		lines = append(lines, l)
	}
	if !found {
		t.Fatal("the example shows no steering arguments")
	}
	_, _, diags, text := loadFileOf(t, strings.Join(lines, "\n"))
	if diags.HasErrors() {
		t.Errorf("the example with its steering line uncommented is refused:\n%s", text)
	}
}

// TestSteeringMarkUnquotedHex: `steering_mark = 0x5350`, the
// way `ip rule` and nft write a mark, unquoted. HCL has no hex numbers,
// so the file does not parse, and the message was HCL's "Missing newline
// after argument" at the x, with the hint that an argument ends with a
// newline: it named neither steering_mark nor the quotes it needs. Now it
// says HCL has no hex numbers and shows it quoted. Found by review
// (helper-80).
func TestSteeringMarkUnquotedHex(t *testing.T) {
	whitelist := `whitelist "w" {
  clients     = ["10.1.0.0/24"]
  server      = "10.2.0.10"
  server_port = 5201
}`
	_, path, diags, text := loadFileOf(t, fmt.Sprintf(twoSitesWith, "    steering_mark = 0x5350", whitelist))
	t.Logf("%s", text)
	if !diags.HasErrors() {
		t.Fatal("taken")
	}
	if !strings.Contains(text, path+":13:") || !strings.Contains(text, "steering_mark") || !strings.Contains(text, `"0x5350"`) {
		t.Errorf("the message neither names steering_mark nor shows it quoted:\n%s", text)
	}
}

// TestReadmeTourValidates: the README's tour of sos.hcl put several
// arguments on one line, which HCL refuses ("Missing newline after
// argument"), so the sketch an operator copies did not validate. Found
// by review (helper-88).
func TestReadmeTourValidates(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	testsupport.RequireNoError(t, err)
	readme := string(b)
	i := strings.Index(readme, "## A short tour of sos.hcl")
	if i < 0 {
		t.Fatal("README has no tour of sos.hcl")
	}
	_, block, ok := strings.Cut(readme[i:], "```hcl\n")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatal("the tour has no hcl block")
	}
	path := filepath.Join(t.TempDir(), "tour.hcl")
	testsupport.RequireNoError(t, os.WriteFile(path, []byte(block), 0o644))
	if _, src, diags := LoadFile(path); diags.HasErrors() {
		var w strings.Builder
		WriteDiagnostics(&w, diags, src.Bytes)
		t.Errorf("the README's tour does not validate:\n%s", w.String())
	}
}
