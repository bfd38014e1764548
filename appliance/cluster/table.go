package cluster

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"
)

// Row is one node in the cluster table, with what is wrong with it.
type Row struct {
	NodeStatus
	// Missing is true for a node the file names that published nothing
	// (it is down, or cut off from etcd for longer than the lease TTL).
	Missing bool `json:"missing,omitempty"`
	// Problems are the flags: "config differs", "psk differs", "not in
	// this file", "missing", an unhealthy node's health.
	Problems []string `json:"problems,omitempty"`
}

// Report joins what the nodes published with the nodes the file names
// (expected) and the hash of the file itself (want): a node that runs
// another file, one whose agents hold another PSK than most agent nodes'
// (all of them on a tie), one that published nothing, one the file does
// not name are flagged. The rows are sorted by node.
func Report(published []NodeStatus, expected []string, want string) []Row {
	var rows []Row
	seen := map[string]bool{}
	common, tie := commonPSK(published)
	for _, st := range published {
		seen[st.Node] = true
		r := Row{NodeStatus: st}
		if st.ConfigHash != want {
			r.Problems = append(r.Problems, "config differs")
		}
		if psk := strings.Join(st.PSKIDs, ","); psk != "" && common != "" {
			switch {
			case tie:
				r.Problems = append(r.Problems, "agents hold different PSKs")
			case psk != common:
				r.Problems = append(r.Problems, "psk differs (most agent nodes hold psk id "+common+")")
			}
		}
		if !slices.Contains(expected, st.Node) {
			r.Problems = append(r.Problems, "not in this file")
		}
		if st.Health != "ok" && st.Health != "" {
			r.Problems = append(r.Problems, st.Health)
		}
		rows = append(rows, r)
	}
	for _, n := range expected {
		if !seen[n] {
			rows = append(rows, Row{NodeStatus: NodeStatus{Node: n}, Missing: true, Problems: []string{"missing: publishes no status"}})
		}
	}
	slices.SortFunc(rows, func(a, b Row) int { return strings.Compare(a.Node, b.Node) })
	return rows
}

// commonPSK is the PSK ids most agent nodes publish, joined, and whether
// another set is published as often; "" when the agent nodes agree (or
// there are none).
func commonPSK(published []NodeStatus) (string, bool) {
	count := map[string]int{}
	for _, st := range published {
		if psk := strings.Join(st.PSKIDs, ","); psk != "" {
			count[psk]++
		}
	}
	if len(count) < 2 {
		return "", false
	}
	common, tie := "", false
	for _, psk := range slices.Sorted(maps.Keys(count)) {
		switch n := count[psk]; {
		case n > count[common]:
			common, tie = psk, false
		case n == count[common]:
			tie = true
		}
	}
	return common, tie
}

// Problems counts the rows with a problem.
func Problems(rows []Row) int {
	n := 0
	for _, r := range rows {
		if len(r.Problems) > 0 {
			n++
		}
	}
	return n
}

// WriteTable renders the rows for a terminal, one node a line; want is the
// local file's hash, shown so the odd one out is plain.
func WriteTable(w io.Writer, rows []Row, want string, now time.Time) {
	fmt.Fprintf(w, "this file: sha256:%.12s\n", want)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tROLES\tOF ROLE\tCONFIG\tPSK ID\tSERIAL\tLAST APPLY\tHEALTH\tSEEN\tPROBLEMS")
	for _, r := range rows {
		if r.Missing {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t-\t-\t-\t%s\n", shown(r.Node), shown(strings.Join(r.Problems, "; ")))
			continue
		}
		role := r.Role
		if role == "" {
			role = "-"
		} else if r.Generation != 0 {
			role = fmt.Sprintf("%s (gen %d)", role, r.Generation)
		}
		seen := "-"
		if !r.Published.IsZero() {
			seen = now.Sub(r.Published).Round(time.Second).String() + " ago"
		}
		problems := strings.Join(r.Problems, "; ")
		if problems == "" {
			problems = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\tsha256:%.12s\t%s\t%d\t%s\t%s\t%s\t%s\n", shown(r.Node), shown(orDash(strings.Join(r.Roles, ","))), shown(role),
			shown(r.ConfigHash), shown(orDash(strings.Join(r.PSKIDs, ","))), r.Serial, shown(orDash(r.LastApply)), shown(orDash(r.Health)), seen, shown(problems))
	}
	tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// shown is s for a terminal: what the nodes published is anyone's who can
// write etcd, so a rune that is not printable (an escape sequence, a tab
// or newline that would make a row of its own) shows as '?'.
func shown(s string) string {
	return strings.Map(func(r rune) rune {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			return '?'
		}
		return r
	}, s)
}
