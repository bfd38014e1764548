package cluster

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestReportFlagsPSKMismatch: agent nodes whose agents hold another PSK
// than most agent nodes' are flagged, all of them on a tie; nodes without
// agents publish no PSK id and are never flagged for it; the table shows
// each node's id.
func TestReportFlagsPSKMismatch(t *testing.T) {
	node := func(name string, ids ...string) NodeStatus {
		return NodeStatus{Node: name, ConfigHash: "aaaa", PSKIDs: ids, Health: "ok"}
	}
	problems := func(published []NodeStatus) map[string]string {
		var expected []string
		for _, st := range published {
			expected = append(expected, st.Node)
		}
		got := map[string]string{}
		for _, r := range Report(published, expected, "aaaa") {
			got[r.Node] = strings.Join(r.Problems, "; ")
		}
		return got
	}
	for _, c := range []struct {
		name      string
		published []NodeStatus
		want      map[string]string
	}{
		{"agreeing", []NodeStatus{node("ctl"), node("a", "11111111"), node("b", "11111111")},
			map[string]string{"ctl": "", "a": "", "b": ""}},
		{"one rotated of three", []NodeStatus{node("ctl"), node("a", "11111111"), node("b", "11111111"), node("c", "22222222")},
			map[string]string{"ctl": "", "a": "", "b": "", "c": "psk differs (most agent nodes hold psk id 11111111)"}},
		{"two rotated of three", []NodeStatus{node("a", "11111111"), node("b", "22222222"), node("c", "22222222")},
			map[string]string{"a": "psk differs (most agent nodes hold psk id 22222222)", "b": "", "c": ""}},
		{"a tie", []NodeStatus{node("ctl"), node("a", "11111111"), node("b", "22222222")},
			map[string]string{"ctl": "", "a": "agents hold different PSKs", "b": "agents hold different PSKs"}},
		{"one agent node", []NodeStatus{node("ctl"), node("a", "11111111")},
			map[string]string{"ctl": "", "a": ""}},
	} {
		got := problems(c.published)
		for n, want := range c.want {
			if got[n] != want {
				t.Errorf("%s: %s flagged %q, want %q", c.name, n, got[n], want)
			}
		}
	}

	var b bytes.Buffer
	WriteTable(&b, Report([]NodeStatus{node("ctl"), node("a", "11111111")}, []string{"a", "ctl", "gone"}, "aaaa"), "aaaa", time.Now())
	lines := strings.Split(b.String(), "\n")
	for _, want := range []string{"PSK ID", "11111111"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the table lacks %q:\n%s", want, b.String())
		}
	}
	// Every row has as many columns as the header: the id of a node
	// without agents is "-" (a missing node's problem is several words).
	header := strings.NewReplacer("OF ROLE", "OF-ROLE", "PSK ID", "PSK-ID", "LAST APPLY", "LAST-APPLY").Replace(lines[1])
	for _, l := range lines[2:] {
		if l == "" || strings.Contains(l, "missing") {
			continue
		}
		if f, h := len(strings.Fields(l)), len(strings.Fields(header)); f != h {
			t.Errorf("row %q has %d fields, the header %d", l, f, h)
		}
	}
}
