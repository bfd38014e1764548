package config

import (
	"fmt"
	"strings"
	"testing"
)

// TestSteeringNumbers: steering_mark (a number, or hex in a string),
// steering_table and steering_priority on an agent, and what is refused,
// at the argument's line: a mark of 0 or past 32 bits, a system routing
// table, a priority at or past the main table's rule.
func TestSteeringNumbers(t *testing.T) {
	whitelist := `whitelist "w" {
  clients     = ["10.1.0.0/24"]
  server      = "10.2.0.10"
  server_port = 5201
}`
	for _, tc := range []struct {
		args                  string
		mark, table, priority uint32
	}{
		{``, 0, 0, 0},
		{`steering_mark = "0x5350"`, 0x5350, 0, 0},
		{`steering_mark = "0XFFFFFFFF"`, 0xffffffff, 0, 0},
		{`steering_mark = 21328`, 21328, 0, 0},
		{`steering_table = 100`, 0, 100, 0},
		{`steering_table = 4294967295`, 0, 0xffffffff, 0},
		{`steering_priority = 32765`, 0, 0, 32765},
	} {
		cfg, _, diags, text := loadFileOf(t, fmt.Sprintf(twoSitesWith, "    "+tc.args, whitelist))
		if diags.HasErrors() {
			t.Errorf("%s refused:\n%s", tc.args, text)
			continue
		}
		a := cfg.Agent("a1")
		if a.SteeringMark != tc.mark || a.SteeringTable != tc.table || a.SteeringPriority != tc.priority {
			t.Errorf("%s: mark %#x table %d priority %d", tc.args, a.SteeringMark, a.SteeringTable, a.SteeringPriority)
		}
	}
	for _, tc := range []struct{ args, want string }{
		{`steering_mark = 0`, `steering_mark "0" is not a packet mark from 1 to 0xffffffff`},
		{`steering_mark = "0x0"`, `steering_mark "0x0" is not a packet mark`},
		{`steering_mark = "0x"`, `steering_mark "0x" is not a packet mark`},
		{`steering_mark = "0x100000000"`, `steering_mark "0x100000000" is not a packet mark`},
		{`steering_mark = 4294967296`, `steering_mark "4294967296" is not a packet mark`},
		{`steering_mark = "mark"`, `steering_mark "mark" is not a packet mark`},
		{`steering_mark = -1`, `steering_mark "-1" is not a packet mark`},
		{`steering_table = 254`, `steering_table 254 is a system routing table (253 default, 254 main, 255 local)`},
		{`steering_table = 0`, `steering_table must be between 1 and 4294967295`},
		{`steering_priority = 32766`, `steering_priority must be between 1 and 32765`},
		{`steering_priority = 0`, `steering_priority must be between 1 and 32765`},
	} {
		_, path, diags, text := loadFileOf(t, fmt.Sprintf(twoSitesWith, "    "+tc.args, whitelist))
		if !diags.HasErrors() {
			t.Errorf("%s taken", tc.args)
			continue
		}
		if !strings.Contains(text, tc.want) || !strings.Contains(text, path+":13:") {
			t.Errorf("%s: diagnostics lack %q at line 13:\n%s", tc.args, tc.want, text)
		}
	}
}

// TestHexNumberHint: an unquoted hex number is HCL's "Missing newline
// after argument" at the x; the message now says HCL has no hex numbers
// and how to write it: in quotes for steering_mark, in decimal for a
// number argument.
func TestHexNumberHint(t *testing.T) {
	for args, want := range map[string]string{
		`steering_table = 0x64`: `hint: Write it in decimal: steering_table = 100.`,
		`switch_port    = 0x1F`: `hint: Write it in decimal: switch_port = 31.`,
		`steering_mark = 0XFF`:  `hint: Write it in quotes: steering_mark = "0XFF".`,
	} {
		src := fmt.Sprintf(twoSitesWith, "    "+args, "")
		if strings.HasPrefix(args, "switch_port") {
			src = strings.Replace(fmt.Sprintf(twoSitesWith, "", ""), "switch_port = 2\n    mac         = \"02:00:00:00:0a:02\"", "switch_port = 0x1F\n    mac         = \"02:00:00:00:0a:02\"", 1)
		}
		_, _, diags, text := loadFileOf(t, src)
		if !diags.HasErrors() || !strings.Contains(text, "HCL has no hex numbers") || !strings.Contains(text, want) {
			t.Errorf("%s:\n%s", args, text)
		}
	}
}
