package config

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/hashicorp/hcl/v2"
)

// WriteDiagnostics prints diagnostics one per line as FILE:LINE:COL, the form
// editors and CI logs link to, followed by the fix hint and the offending
// source line when src holds it.
func WriteDiagnostics(w io.Writer, diags hcl.Diagnostics, src []byte) {
	lines := strings.Split(string(src), "\n")
	for _, d := range diags {
		sev := "error"
		if d.Severity == hcl.DiagWarning {
			sev = "warning"
		}
		pos := "?"
		if d.Subject != nil {
			pos = fmt.Sprintf("%s:%d:%d", d.Subject.Filename, d.Subject.Start.Line, d.Subject.Start.Column)
		}
		fmt.Fprintf(w, "%s: %s: %s\n", pos, sev, d.Summary)
		if d.Subject != nil && d.Subject.Start.Line >= 1 && d.Subject.Start.Line <= len(lines) && len(src) > 0 {
			line := strings.TrimRight(lines[d.Subject.Start.Line-1], "\r")
			if len(line) > 200 {
				// At a character's start: a cut inside one would make
				// the line unprintable, and it would not be quoted.
				cut := 200
				for cut > 0 && !utf8.RuneStart(line[cut]) {
					cut--
				}
				line = line[:cut] + "..."
			}
			if strings.TrimSpace(line) != "" && printable(line) {
				fmt.Fprintf(w, "    | %s\n", line)
			}
		}
		if d.Detail != "" {
			fmt.Fprintf(w, "    hint: %s\n", d.Detail)
		}
	}
}

// printable reports whether a source line is safe to echo to a terminal.
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < ' ' && r != '\t' || r == 0x7f {
			return false
		}
	}
	return true
}
