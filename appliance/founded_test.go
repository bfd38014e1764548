package appliance

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestFoundedFileNames: each agent's founded sessions file sits next to
// the state store, named after the agent; a name with other characters
// than letters, digits, '-' and '_' gets a hash too, so it never shares
// another's file, nor one of the relay's generations of it (<file>.old,
// <file>.new). Found by review (helper-51): '.' was kept, so agents "b"
// and "b.new" shared founded-b.new, "b"'s new generation.
func TestFoundedFileNames(t *testing.T) {
	const state = "/var/lib/sosappliance/state.db"
	if got := FoundedFile(state, "agent-a_1"); got != "/var/lib/sosappliance/founded-agent-a_1" {
		t.Errorf("plain name: %s", got)
	}
	for _, pair := range [][2]string{{"b", "b.new"}, {"b", "b.old"}, {"b.new", "b_new"}} {
		p, q := FoundedFile(state, pair[0]), FoundedFile(state, pair[1])
		for _, g := range []string{"", ".old", ".new"} {
			for _, h := range []string{"", ".old", ".new"} {
				if p+g == q+h {
					t.Errorf("agents %q and %q share %s", pair[0], pair[1], p+g)
				}
			}
		}
	}
	odd, plain := FoundedFile(state, "a/../b"), FoundedFile(state, "a_.._b")
	if filepath.Dir(odd) != "/var/lib/sosappliance" {
		t.Errorf("a name with a slash left the state directory: %s", odd)
	}
	if odd == plain {
		t.Errorf("two agents share the file %s", odd)
	}
}

// TestDaemonRelayRecordsFoundedSessions: a daemon's server-side agent
// opens its founded sessions file beside the state store as it starts.
func TestDaemonRelayRecordsFoundedSessions(t *testing.T) {
	if !testsupport.InFreshNetns(t, "ip", "nft") {
		return
	}
	n := newReloadNode(t)
	writeFile(t, n.cfgPath, n.config(reloadEdit{rmemMax: "100000", controllerPort: 6653, dataPort: 9877}))
	d := n.daemon()
	runDaemon(t, d, n.logs)
	testsupport.Eventually(t, 15*time.Second, "start-up", func() bool {
		return d.Status().Serial == 1 && listens("10.1.0.2:9877")
	})
	matches, _ := filepath.Glob(filepath.Join(n.dir, "founded-*"))
	if len(matches) != 1 {
		t.Fatalf("founded sessions files beside the state store: %v, want one", matches)
	}
	fi, err := os.Stat(matches[0])
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s: mode %v, want 0600", matches[0], fi.Mode())
	}
}
