package appliance

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/sosappliance/sosappliance/host/item"
)

// TestRollbackFailingHalfwayThenRerunRestoresAll (held): apply
// sets rmem_max and wmem_max (both 212992 before), a config edit sets
// rmem_max again (the first recorded value must survive), then a
// rollback fails on wmem_max (its write fails). The restore done before
// the failure is put back and forgotten; the failed one keeps its
// record; once the write works, a second rollback puts 212992 back and
// leaves no record.
// Written by review (helper-65); it passed.
func TestRollbackFailingHalfwayThenRerunRestoresAll(t *testing.T) {
	ctx := context.Background()
	root := tempHost(t)
	exs := tempHostExecutors(root)
	st := openTestStore(t, filepath.Join(t.TempDir(), "state.db"))
	read := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(root, "proc/sys/net/core", name))
		return string(b)
	}
	mustApply(t, st, exs, mustPlan(t, st, exs, []item.Item{
		sysctlItem("net.core.rmem_max", "1000000"), sysctlItem("net.core.wmem_max", "1000000")}))
	mustApply(t, st, exs, mustPlan(t, st, exs, []item.Item{
		sysctlItem("net.core.rmem_max", "3000000"), sysctlItem("net.core.wmem_max", "1000000")}))
	if r, _, _ := st.Record(item.KindSysctl, "net.core.rmem_max"); r.Previous != "212992" {
		t.Fatalf("the second apply replaced the recorded original: %+v", r)
	}

	wmem := filepath.Join(root, "proc/sys/net/core/wmem_max")
	os.Remove(wmem)
	if err := os.Symlink("/proc/version", wmem); err != nil { // reads, every write fails
		t.Fatal(err)
	}
	_, res, err := Rollback(ctx, st, exs, "node-a")
	if err == nil {
		t.Fatal("rollback with a failing write succeeded")
	}
	if len(res.Done) != 1 || read("rmem_max") != "212992\n" {
		t.Fatalf("first rollback: done %+v, rmem_max %q, err %v", res.Done, read("rmem_max"), err)
	}
	recs, _ := st.Records()
	if len(recs) != 1 || recs[0].Key != "net.core.wmem_max" || recs[0].Previous != "212992" {
		t.Fatalf("records after the failed rollback: %+v", recs)
	}

	os.Remove(wmem)
	if err := os.WriteFile(wmem, []byte("1000000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Rollback(ctx, st, exs, "node-a"); err != nil {
		t.Fatalf("second rollback: %v", err)
	}
	if read("rmem_max") != "212992\n" || read("wmem_max") != "212992\n" {
		t.Fatalf("after the second rollback: rmem_max %q, wmem_max %q", read("rmem_max"), read("wmem_max"))
	}
	if recs, _ := st.Records(); len(recs) != 0 {
		t.Fatalf("records left: %+v", recs)
	}
}
