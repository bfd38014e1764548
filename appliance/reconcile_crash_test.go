package appliance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/appliance/store"
	"github.com/sosappliance/sosappliance/host/item"
	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/tuning"
)

// crashItems are six sysctls, applied in this (sorted) order.
var crashItems = []item.Item{
	sysctlItem("net.core.rmem_max", "134217728"),
	sysctlItem("net.core.wmem_max", "134217728"),
	sysctlItem("net.ipv4.tcp_congestion_control", "bbr"),
	sysctlItem("net.ipv4.tcp_mtu_probing", "1"),
	sysctlItem("net.ipv4.tcp_rmem", "4096 87380 67108864"),
	sysctlItem("net.ipv4.tcp_wmem", "4096 65536 67108864"),
}

// crashChild is what the re-executed test binary is told to do.
type crashChild struct {
	Root, DB, Marker string
	// PauseAt is the 1-based Apply call to stop in; AfterWrite says
	// whether to stop after the host was changed or before.
	PauseAt    int
	AfterWrite bool
}

// pausing is the real sysctl executor with a pause point: on its PauseAt-th
// Apply it writes the marker file and then sleeps until it is killed.
type pausing struct {
	*tuning.Sysctl
	spec  crashChild
	calls atomic.Int32
}

func (p *pausing) Apply(ctx context.Context, it item.Item) error {
	if int(p.calls.Add(1)) != p.spec.PauseAt {
		return p.Sysctl.Apply(ctx, it)
	}
	if p.spec.AfterWrite {
		if err := p.Sysctl.Apply(ctx, it); err != nil {
			return err
		}
	}
	if err := os.WriteFile(p.spec.Marker, []byte(it.Key), 0o644); err != nil {
		return err
	}
	for {
		time.Sleep(time.Minute)
	}
}

// crashChildRole is the child that applies crashItems until it is killed.
const crashChildRole = "apply-until-killed"

// runCrashChild applies crashItems as the JSON crashChild in args[0] says,
// and never returns: it is killed at the pause point.
func runCrashChild(args []string) int {
	var spec crashChild
	if err := json.Unmarshal([]byte(args[0]), &spec); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	st, err := store.Open(spec.DB, store.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	exs := map[string]tuning.Executor{item.KindSysctl: &pausing{Sysctl: tuning.NewSysctl(spec.Root), spec: spec}}
	_, _, err = Converge(context.Background(), st, exs, crashItems, "node-a", "h")
	fmt.Fprintf(os.Stderr, "apply finished instead of pausing: %v\n", err)
	return 3
}

// TestKillDuringApplyThenRerunConverges kills an apply with SIGKILL halfway
// (once just before a host change, once just after it) and checks that the
// store says exactly which items were applied, that no previous value is
// lost, that a plan saved before is now stale, and that a re-run converges
// and a rollback gives back the original host.
func TestKillDuringApplyThenRerunConverges(t *testing.T) {
	for _, afterWrite := range []bool{false, true} {
		t.Run(fmt.Sprintf("afterWrite=%v", afterWrite), func(t *testing.T) {
			killDuringApply(t, afterWrite)
		})
	}
}

func killDuringApply(t *testing.T, afterWrite bool) {
	const pauseAt = 4
	ctx := context.Background()
	root := tempHost(t)
	exs := tempHostExecutors(root)
	original := snapshot(t, root)
	dir := t.TempDir()
	spec := crashChild{Root: root, DB: filepath.Join(dir, "state.db"), Marker: filepath.Join(dir, "paused"), PauseAt: pauseAt, AfterWrite: afterWrite}

	st, err := store.Open(spec.DB, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	saved := mustPlan(t, st, exs, crashItems)
	st.Close()

	specJSON, _ := json.Marshal(spec)
	child := testsupport.StartDaemon(t, testsupport.Command(t, crashChildRole, string(specJSON)))
	deadline := time.After(60 * time.Second)
	for paused := false; !paused; {
		select {
		case <-child.Done():
			t.Fatalf("child exited before pausing: %v\n%s", child.Err(), child.Output)
		case <-deadline:
			t.Fatalf("child did not reach the pause point\n%s", child.Output)
		case <-time.After(10 * time.Millisecond):
			_, err := os.Stat(spec.Marker)
			paused = err == nil
		}
	}
	if err := child.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-child.Done()

	st = openTestStore(t, spec.DB)
	if serial, _ := st.Serial(); serial != 1 {
		t.Fatalf("serial after kill = %d, want 1", serial)
	}
	last, _, _ := st.LastHistory()
	if last.Result != store.ResultIncomplete || len(last.Changes) != len(crashItems) {
		t.Fatalf("history after kill: %+v", last)
	}
	recs, err := st.Records()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != pauseAt {
		t.Fatalf("%d records after kill at item %d: %+v", len(recs), pauseAt, recs)
	}
	snap := snapshot(t, root)
	for i, it := range crashItems {
		file := filepath.Join("proc/sys", strings.ReplaceAll(it.Key, ".", "/"))
		wantOnHost := original[file]
		if i < pauseAt-1 || (i == pauseAt-1 && afterWrite) {
			wantOnHost = it.Value
		}
		if snap[file] != wantOnHost {
			t.Errorf("%s on host = %q, want %q", it.Key, snap[file], wantOnHost)
		}
		if i >= pauseAt {
			continue
		}
		r := recs[i]
		if r.Key != it.Key || r.Previous != original[file] || !r.PreviousPresent || r.Desired != it.Value {
			t.Errorf("record %d = %+v", i, r)
		}
		if applied := i < pauseAt-1; r.Applied != applied {
			t.Errorf("record %s applied = %v, want %v", it.Key, r.Applied, applied)
		}
	}

	if _, err := Apply(ctx, st, exs, saved); !errors.As(err, new(*store.StaleError)) {
		t.Fatalf("plan saved before the crash: err = %v, want stale", err)
	}

	rerun := mustPlan(t, st, exs, crashItems)
	if add, upd, _ := rerun.Counts(); add+upd != len(crashItems)-pauseAt+1 {
		t.Errorf("re-run plan:\n%s", rerun.Text())
	}
	mustApply(t, st, exs, rerun)
	if p := mustPlan(t, st, exs, crashItems); !p.Empty() {
		t.Fatalf("not converged after re-run:\n%s", p.Text())
	}
	recs, _ = st.Records()
	for i, r := range recs {
		file := filepath.Join("proc/sys", strings.ReplaceAll(crashItems[i].Key, ".", "/"))
		if !r.Applied || r.Previous != original[file] {
			t.Errorf("record after re-run %+v, want previous %q", r, original[file])
		}
	}
	if _, _, err := Rollback(ctx, st, exs, "node-a"); err != nil {
		t.Fatal(err)
	}
	if snap := snapshot(t, root); fmt.Sprint(snap) != fmt.Sprint(original) {
		t.Fatalf("host after rollback:\n%v\nwant\n%v", snap, original)
	}
	h, _ := st.History()
	results := make([]string, len(h))
	for i, e := range h {
		results[i] = e.Operation + ":" + e.Result
	}
	if got := strings.Join(results, " "); got != "apply:incomplete apply:ok rollback:ok" {
		t.Errorf("history = %s", got)
	}
}
