package main

import (
	"strings"
	"testing"
)

// A mistyped flag got cobra's bare "unknown flag: --nod", and a mistyped
// --node the list of known nodes without the near one, while a mistyped
// command got "Did you mean this?". Both now name the nearest. Found by
// review (helper-81).
func TestMistypedFlagAndNodeSuggested(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"plan", "--nod", "agent-east"}, "unknown flag: --nod; did you mean --node?"},
		{[]string{"apply", "--auto-aprove"}, "unknown flag: --auto-aprove; did you mean --auto-approve?"},
		{[]string{"plan", "--xyzzy"}, "unknown flag: --xyzzy (sosappliance plan --help lists the flags)"},
		{[]string{"plan", "-c", "../../examples/minimal.hcl", "--node", "agent-est"}, `node "agent-est" has no role in the configuration; did you mean --node agent-east?`},
		{[]string{"plan", "-c", "../../examples/minimal.hcl", "--node", "nothing-near"}, `node "nothing-near" has no role in the configuration (known nodes: agent-east, agent-west, ctl); pass --node`},
	} {
		code, out, errOut := runCLI(t, c.args...)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("%s: exit %d, want an error that says %q:\n%s%s", strings.Join(c.args, " "), code, c.want, out, errOut)
		}
	}
}
