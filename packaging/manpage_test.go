package packaging

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// demoCLI is a cobra tree with every part of the help layout the man page
// writer handles: a long description with a literal block, aliases,
// examples, a multi-line flag usage, inherited flags and nested commands.
// Its help text comes from cobra's own templates, so the parser is tested
// against what cobra prints rather than against a copy of it.
func demoCLI() *cobra.Command {
	noop := func(*cobra.Command, []string) error { return nil }
	root := &cobra.Command{
		Use:   "demo",
		Short: "Demonstrate the help layout",
		Long: `demo keeps a node in the state its file describes.
A second line of the same paragraph, with a back\slash.

Type this to try it:

    demo run --fast

.A line that starts with a dot stays text.`,
	}
	root.PersistentFlags().String("node", "", "node name (default: the hostname)")

	run := &cobra.Command{
		Use:     "run [FILE]",
		Short:   "Run the daemon",
		Aliases: []string{"r"},
		Example: "  demo run -c /etc/demo.hcl\n  demo r --detailed",
		RunE:    noop,
	}
	run.Flags().StringP("config", "c", "/etc/demo.hcl", "configuration file")
	run.Flags().Bool("detailed", false, "print more\nand then some more")

	db := &cobra.Command{Use: "db", Short: "Work on the state store"}
	db.AddCommand(&cobra.Command{Use: "compact", Short: "Compact the state store", RunE: noop})

	root.AddCommand(run, db)
	return root
}

func demoHelp(args ...string) (string, error) {
	root := demoCLI()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

func TestParseHelp(t *testing.T) {
	text, err := demoHelp("run", "--help")
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseHelp(text)
	if err != nil {
		t.Fatal(err)
	}
	want := CommandHelp{
		Path:        "demo run",
		Description: "Run the daemon",
		Usage:       []string{"demo run [FILE] [flags]"},
		Aliases:     "run, r",
		Examples:    []string{"  demo run -c /etc/demo.hcl", "  demo r --detailed"},
		Flags: []HelpEntry{
			{Name: "-c, --config string", Text: `configuration file (default "/etc/demo.hcl")`},
			{Name: "--detailed", Text: "print more\nand then some more"},
			{Name: "-h, --help", Text: "help for run"},
		},
		GlobalFlags: []HelpEntry{{Name: "--node string", Text: "node name (default: the hostname)"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseHelp(run --help):\n got %#v\nwant %#v\nfrom:\n%s", got, want, text)
	}

	text, err = demoHelp("--help")
	if err != nil {
		t.Fatal(err)
	}
	root, err := ParseHelp(text)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range root.Commands {
		names = append(names, c.Name+"="+c.Text)
	}
	wantNames := []string{
		"completion=Generate the autocompletion script for the specified shell",
		"db=Work on the state store",
		"help=Help about any command",
		"run=Run the daemon",
	}
	if !reflect.DeepEqual(names, wantNames) {
		t.Errorf("root commands = %q, want %q", names, wantNames)
	}
	if root.Path != "demo" || !strings.HasPrefix(root.Description, "demo keeps a node") {
		t.Errorf("root path %q, description %q", root.Path, root.Description)
	}
}

func TestParseHelpRejectsNonHelp(t *testing.T) {
	for _, text := range []string{"", "sosappliance 1.2.3\n", "Usage:\n\nFlags:\n  -h, --help   help\n"} {
		if _, err := ParseHelp(text); err == nil {
			t.Errorf("ParseHelp(%q) accepted text that is not a help page", text)
		}
	}
}

func demoManPage(t *testing.T) ManPage {
	t.Helper()
	page, err := CrawlManPage(demoHelp, "demo", "keep a node converged", "1.2.3~rc1", time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	page.Extra = []ManSection{
		{Title: "Files", Entries: []HelpEntry{{Name: "/etc/demo.hcl", Text: "The file."}}},
		{Title: "See also", Text: "nft(8), ip(8)"},
	}
	return page
}

func TestCrawlManPage(t *testing.T) {
	page := demoManPage(t)
	var paths []string
	for _, c := range page.Commands {
		paths = append(paths, c.Path)
	}
	// completion and help are left out; nested commands are reached.
	want := []string{"demo db", "demo db compact", "demo run"}
	if !reflect.DeepEqual(paths, want) {
		t.Errorf("documented commands = %q, want %q", paths, want)
	}
	if page.Commands[2].Short != "Run the daemon" {
		t.Errorf("run's summary = %q, taken from the root's command list", page.Commands[2].Short)
	}
}

func TestManPageGolden(t *testing.T) {
	got := demoManPage(t).Roff()
	golden := filepath.Join("testdata", "demo.1")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("man page differs from %s (run go test -update after checking the change):\n%s", golden, got)
	}
}

// TestManPageRenders runs the page through man(1) the way lintian does: no
// warnings, and the options come out as ASCII minus signs that can be
// copied back into a shell.
func TestManPageRenders(t *testing.T) {
	testsupport.RequireBinaries(t, "man")
	rendered, warnings := renderMan(t, []byte(demoManPage(t).Roff()))
	if warnings != "" {
		t.Errorf("man --warnings complains:\n%s", warnings)
	}
	for _, want := range []string{
		"demo - keep a node converged",
		"demo run [FILE] [flags]",
		"-c, --config string",
		"back\\slash",
		".A line that starts with a dot stays text.",
		"    demo run --fast",
		"OPTIONS",
		"--node string",
	} {
		if !strings.Contains(rendered, want) {
			t.Errorf("rendered page lacks %q:\n%s", want, rendered)
		}
	}
}

// renderMan formats a page with man's lint warnings on, as plain text.
func renderMan(t *testing.T, roff []byte) (rendered, warnings string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "page.1")
	if err := os.WriteFile(path, roff, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("man", "--warnings", "-E", "UTF-8", "-l", "-Tutf8", path)
	cmd.Env = append(os.Environ(), "MANWIDTH=200", "LC_ALL=C.UTF-8", "MAN_KEEP_FORMATTING=0")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("man: %v\n%s", err, stderr.String())
	}
	// Strip overstrike bold and underline (c\bc, _\bc) that grotty emits.
	var plain []rune
	for _, r := range stdout.String() {
		if r == '\b' && len(plain) > 0 {
			plain = plain[:len(plain)-1]
			continue
		}
		plain = append(plain, r)
	}
	return string(plain), strings.TrimSpace(stderr.String())
}
