package packaging

import (
	"bufio"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// CommandHelp is one command's `--help` output, split into the parts cobra
// prints. The man page is written from these rather than from the cobra
// tree itself so that packaging needs neither the CLI's package main nor a
// man page generator module.
type CommandHelp struct {
	Path        string // "sosappliance validate"
	Short       string // the one-line summary, taken from the parent's command list
	Description string // the long description cobra prints first
	Usage       []string
	Aliases     string
	Examples    []string
	Commands    []HelpEntry
	Flags       []HelpEntry
	GlobalFlags []HelpEntry
}

// HelpEntry is one line of a command or flag list: the name or flag spec,
// and its text.
type HelpEntry struct {
	Name string
	Text string
}

// sectionHeader matches cobra's section titles ("Usage:", "Flags:",
// "Available Commands:"), which are the only unindented lines ending in a
// colon.
var sectionHeader = regexp.MustCompile(`^[A-Z][A-Za-z ]*:$`)

// ParseHelp splits the output of `CMD --help` (cobra's default help and
// usage templates) into its parts.
func ParseHelp(text string) (CommandHelp, error) {
	var h CommandHelp
	lines := strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n")
	usageAt := -1
	for i, l := range lines {
		if l == "Usage:" {
			usageAt = i
			break
		}
	}
	if usageAt < 0 {
		return h, fmt.Errorf("help text has no Usage: section")
	}
	h.Description = strings.TrimSpace(strings.Join(lines[:usageAt], "\n"))

	section := ""
	for _, l := range lines[usageAt:] {
		if sectionHeader.MatchString(l) {
			section = strings.TrimSuffix(l, ":")
			continue
		}
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, `Use "`) {
			continue
		}
		switch {
		case section == "Usage":
			h.Usage = append(h.Usage, strings.TrimSpace(l))
		case section == "Aliases":
			h.Aliases = strings.TrimSpace(l)
		case section == "Examples":
			h.Examples = append(h.Examples, l)
		case section == "Flags":
			h.Flags = appendFlag(h.Flags, l)
		case section == "Global Flags":
			h.GlobalFlags = appendFlag(h.GlobalFlags, l)
		case strings.HasSuffix(section, "Commands"):
			name, short, _ := strings.Cut(strings.TrimSpace(l), " ")
			h.Commands = append(h.Commands, HelpEntry{Name: name, Text: strings.TrimSpace(short)})
		}
	}
	if len(h.Usage) == 0 {
		return h, fmt.Errorf("help text has an empty Usage: section")
	}
	h.Path = usagePath(h.Usage[0])
	return h, nil
}

// usagePath is the command path at the start of a usage line: the words
// before the first argument placeholder or flag.
func usagePath(usage string) string {
	var words []string
	for _, w := range strings.Fields(usage) {
		if strings.ContainsAny(w[:1], "[<-{") {
			break
		}
		words = append(words, w)
	}
	return strings.Join(words, " ")
}

// appendFlag adds one pflag usage line. The flag spec and its text are
// separated by at least two spaces; an indented line that does not start
// with a dash continues the previous flag's text (a usage string with a
// newline).
func appendFlag(flags []HelpEntry, line string) []HelpEntry {
	trimmed := strings.TrimSpace(line)
	if !strings.HasPrefix(trimmed, "-") && len(flags) > 0 {
		flags[len(flags)-1].Text += "\n" + trimmed
		return flags
	}
	spec, text := trimmed, ""
	if i := strings.Index(trimmed, "  "); i >= 0 {
		spec, text = trimmed[:i], strings.TrimSpace(trimmed[i:])
	}
	return append(flags, HelpEntry{Name: spec, Text: text})
}

// ManSection is an extra man page section (FILES, SEE ALSO, ...): an
// optional paragraph and an optional tagged list.
type ManSection struct {
	Title   string
	Text    string
	Entries []HelpEntry
}

// ManPage is everything a section 1 page is written from.
type ManPage struct {
	Name     string // command name, e.g. "sosappliance"
	Summary  string // the NAME line's description
	Version  string
	Date     time.Time
	Root     CommandHelp
	Commands []CommandHelp // documented subcommands, in order
	Extra    []ManSection  // appended after COMMANDS
}

// Roff renders the page with the man(7) macros.
func (m ManPage) Roff() string {
	var b strings.Builder
	fmt.Fprintf(&b, ".TH %s 1 %s %s %s\n",
		roffQuote(strings.ToUpper(m.Name)), roffQuote(m.Date.UTC().Format("2006-01-02")),
		roffQuote(m.Name+" "+m.Version), roffQuote(m.Name+" manual"))
	// No hyphenation and ragged right: command names and options must not be
	// split or stretched.
	b.WriteString(".nh\n.ad l\n")
	b.WriteString(".SH NAME\n")
	fmt.Fprintf(&b, "%s \\- %s\n", roffEscape(m.Name), roffEscape(m.Summary))

	b.WriteString(".SH SYNOPSIS\n")
	for _, u := range m.Root.Usage {
		writeSynopsis(&b, u)
	}
	for _, c := range m.Commands {
		for _, u := range c.Usage {
			writeSynopsis(&b, u)
		}
	}

	if m.Root.Description != "" {
		b.WriteString(".SH DESCRIPTION\n")
		writeText(&b, m.Root.Description)
	}
	// A subcommand's "Global Flags" are the root's persistent flags, listed
	// here once rather than under every command.
	if flags := documentedFlags(m.Root.Flags); len(flags) > 0 {
		b.WriteString(".SH OPTIONS\n")
		writeEntries(&b, flags)
	}

	if len(m.Commands) > 0 {
		b.WriteString(".SH COMMANDS\n")
		for _, c := range m.Commands {
			fmt.Fprintf(&b, ".SS %s\n", roffQuote(c.Path))
			desc := c.Description
			if desc == "" {
				desc = c.Short
			}
			writeText(&b, desc)
			if c.Aliases != "" {
				fmt.Fprintf(&b, ".PP\nAliases: %s\n", roffEscape(c.Aliases))
			}
			if len(c.Commands) > 0 {
				b.WriteString(".PP\nSubcommands:\n")
				writeEntries(&b, c.Commands)
			}
			if flags := documentedFlags(c.Flags); len(flags) > 0 {
				b.WriteString(".PP\nOptions:\n")
				writeEntries(&b, flags)
			}
			if len(c.Examples) > 0 {
				b.WriteString(".PP\nExamples:\n")
				writeVerbatim(&b, c.Examples)
			}
		}
	}

	for _, s := range m.Extra {
		fmt.Fprintf(&b, ".SH %s\n", roffQuote(strings.ToUpper(s.Title)))
		if s.Text != "" {
			writeText(&b, s.Text)
		}
		writeEntries(&b, s.Entries)
	}
	return b.String()
}

func writeSynopsis(b *strings.Builder, usage string) {
	words := strings.Fields(usage)
	if len(words) == 0 {
		return
	}
	b.WriteString(".PP\n")
	// The command words are bold, the placeholders that follow are not.
	i := 0
	for i < len(words) && !strings.ContainsAny(words[i][:1], "[<-{") {
		i++
	}
	fmt.Fprintf(b, ".B %s\n", roffEscape(strings.Join(words[:i], " ")))
	if i < len(words) {
		fmt.Fprintf(b, "%s\n", roffEscape(strings.Join(words[i:], " ")))
	}
}

// writeText writes paragraphs separated by blank lines; a paragraph whose
// lines are all indented is a literal block (commands to type), the rest is
// filled text.
func writeText(b *strings.Builder, text string) {
	for i, para := range splitParagraphs(text) {
		if i > 0 {
			b.WriteString(".PP\n")
		}
		if allIndented(para) {
			writeVerbatim(b, para)
			continue
		}
		for _, l := range para {
			fmt.Fprintf(b, "%s\n", roffLine(strings.TrimSpace(l)))
		}
	}
}

// documentedFlags leaves out -h, --help: every command has it, so listing
// it under each one would only add noise.
func documentedFlags(flags []HelpEntry) []HelpEntry {
	var out []HelpEntry
	for _, f := range flags {
		if f.Name != "-h, --help" {
			out = append(out, f)
		}
	}
	return out
}

func writeEntries(b *strings.Builder, entries []HelpEntry) {
	for _, e := range entries {
		b.WriteString(".TP\n")
		fmt.Fprintf(b, ".B %s\n", roffEscape(e.Name))
		for _, l := range strings.Split(e.Text, "\n") {
			fmt.Fprintf(b, "%s\n", roffLine(strings.TrimSpace(l)))
		}
	}
}

func writeVerbatim(b *strings.Builder, lines []string) {
	b.WriteString(".RS\n.nf\n")
	for _, l := range lines {
		fmt.Fprintf(b, "%s\n", roffLine(strings.TrimLeft(l, " \t")))
	}
	b.WriteString(".fi\n.RE\n")
}

func splitParagraphs(text string) [][]string {
	var paras [][]string
	var cur []string
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		l := strings.TrimRight(sc.Text(), " \t")
		if l == "" {
			if len(cur) > 0 {
				paras = append(paras, cur)
				cur = nil
			}
			continue
		}
		cur = append(cur, l)
	}
	if len(cur) > 0 {
		paras = append(paras, cur)
	}
	return paras
}

func allIndented(lines []string) bool {
	for _, l := range lines {
		if !strings.HasPrefix(l, " ") && !strings.HasPrefix(l, "\t") {
			return false
		}
	}
	return true
}

// roffEscape makes text safe inside a roff line: backslashes are the escape
// character, and "-" must be \- so that options stay ASCII minus signs that
// can be copied from the rendered page.
func roffEscape(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	return strings.ReplaceAll(s, "-", `\-`)
}

// roffLine escapes a whole input line; a line starting with "." or "'"
// would otherwise be read as a request.
func roffLine(s string) string {
	s = roffEscape(s)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}

// roffQuote makes one macro argument.
func roffQuote(s string) string {
	return `"` + strings.ReplaceAll(roffEscape(s), `"`, `\(dq`) + `"`
}
