package appliance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/appliance/plan"
	"github.com/sosappliance/sosappliance/appliance/store"
	"github.com/sosappliance/sosappliance/host/item"
	"github.com/sosappliance/sosappliance/tuning"
)

func sysctlItem(key, value string) item.Item {
	return item.Item{Kind: item.KindSysctl, Key: key, Value: value}
}

func wanTuning() []item.Item {
	return []item.Item{
		sysctlItem("net.core.rmem_max", "134217728"),
		sysctlItem("net.ipv4.tcp_rmem", "4096 87380  67108864"),
		sysctlItem("net.ipv4.tcp_congestion_control", "bbr"),
		sysctlItem("net.ipv4.tcp_mtu_probing", "0"), // already so: not owned
		{Kind: item.KindIRQ, Key: "eth1", Value: "2,3"},
	}
}

func TestApplyTwiceChangesNothing(t *testing.T) {
	root := tempHost(t)
	exs := tempHostExecutors(root)
	st := openTestStore(t, filepath.Join(t.TempDir(), "state.db"))

	p := mustPlan(t, st, exs, wanTuning())
	if p.Serial != 0 || p.Node != "node-a" || p.ConfigHash != "hash" || p.Operation != plan.OperationApply {
		t.Fatalf("plan header %+v", p)
	}
	if add, upd, res := p.Counts(); add != 0 || upd != 4 || res != 0 {
		t.Fatalf("plan counts %d %d %d:\n%s", add, upd, res, p.Text())
	}
	res := mustApply(t, st, exs, p)
	if res.Serial != 1 || len(res.Done) != 4 {
		t.Fatalf("result %+v", res)
	}
	snap := snapshot(t, root)
	for path, want := range map[string]string{
		"proc/sys/net/ipv4/tcp_rmem":                         "4096 87380 67108864",
		"proc/sys/net/ipv4/tcp_congestion_control":           "bbr",
		"proc/irq/40/smp_affinity_list":                      "2",
		"proc/irq/41/smp_affinity_list":                      "3",
		"proc/irq/42/smp_affinity_list":                      "2",
		"proc/irq/43/smp_affinity_list":                      "3",
		"proc/sys/net/ipv4/tcp_mtu_probing":                  "0",
		"proc/sys/net/ipv4/tcp_available_congestion_control": "reno cubic bbr",
	} {
		if snap[path] != want {
			t.Errorf("%s = %q, want %q", path, snap[path], want)
		}
	}

	again := mustPlan(t, st, exs, wanTuning())
	if !again.Empty() || again.Serial != 1 {
		t.Fatalf("second plan not empty:\n%s", again.Text())
	}
	res = mustApply(t, st, exs, again)
	if res.Serial != 0 || len(res.Done) != 0 {
		t.Fatalf("empty apply did something: %+v", res)
	}
	if serial, _ := st.Serial(); serial != 1 {
		t.Fatalf("empty apply moved the serial to %d", serial)
	}

	recs, err := st.Records()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 4 {
		t.Fatalf("records %+v", recs)
	}
	for _, r := range recs {
		if !r.Applied || r.FirstSerial != 1 {
			t.Errorf("record %+v", r)
		}
		if r.ID() == "irq/eth1" && r.Previous != "40:0-3 41:0-3 42:1 43:0-3" {
			t.Errorf("irq previous = %q", r.Previous)
		}
	}
	h, err := st.History()
	if err != nil || len(h) != 1 || h[0].Result != store.ResultOK || h[0].Node != "node-a" || len(h[0].Changes) != 4 {
		t.Fatalf("history %+v %v", h, err)
	}
}

func TestSavedPlanIsRefusedOnceStale(t *testing.T) {
	root := tempHost(t)
	exs := tempHostExecutors(root)
	st := openTestStore(t, filepath.Join(t.TempDir(), "state.db"))

	saved, err := plan.Encode(mustPlan(t, st, exs, wanTuning()))
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, st, exs, mustPlan(t, st, exs, wanTuning()[:2]))

	old, err := plan.Decode(saved)
	if err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, root)
	_, err = Apply(context.Background(), st, exs, old)
	var stale *store.StaleError
	if !errors.As(err, &stale) || stale.PlanSerial != 0 || stale.StateSerial != 1 {
		t.Fatalf("stale plan: err = %v", err)
	}
	if !strings.Contains(err.Error(), "plan is stale") {
		t.Errorf("message %q", err)
	}
	if after := snapshot(t, root); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatal("a stale plan changed the host")
	}

	fresh, err := plan.Decode(mustEncode(t, mustPlan(t, st, exs, wanTuning())))
	if err != nil {
		t.Fatal(err)
	}
	if res := mustApply(t, st, exs, fresh); res.Serial != 2 {
		t.Fatalf("fresh saved plan: %+v", res)
	}
}

func mustEncode(t *testing.T, p plan.Plan) []byte {
	t.Helper()
	b, err := plan.Encode(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestPlanNamesEveryInvalidItem(t *testing.T) {
	root := tempHost(t)
	exs := tempHostExecutors(root)
	st := openTestStore(t, filepath.Join(t.TempDir(), "state.db"))
	_, err := Plan(context.Background(), st, exs, []item.Item{
		sysctlItem("net.ipv4.tcp_nosuch", "1"),
		sysctlItem("net.ipv4.tcp_congestion_control", "sosnosuchcc"),
		{Kind: item.KindIRQ, Key: "eth1", Value: "0-7"},
		{Kind: item.KindRelay, Key: item.RelayKeyCPUs, Value: "many"},
		{Kind: "flows", Key: "s1", Value: "x"},
		sysctlItem("net.core.rmem_max", "1"),
		sysctlItem("net.core.rmem_max", "2"),
	}, "node-a", "")
	if err == nil {
		t.Fatal("Plan accepted invalid items")
	}
	for _, want := range []string{
		"sysctl net.ipv4.tcp_nosuch does not exist",
		`"sosnosuchcc": congestion control not available`,
		"CPUs 4-7 are not online",
		"relay/cpus",
		"no executor for flows items",
		`sysctl/net.core.rmem_max is desired twice`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Plan error lacks %q:\n%v", want, err)
		}
	}
}

// failOn makes the wrapped real executor fail when asked to apply one key,
// before touching anything: a host that refuses a change halfway.
type failOn struct {
	tuning.Executor
	key string
}

func (f failOn) Apply(ctx context.Context, it item.Item) error {
	if it.Key == f.key {
		return errors.New("injected failure")
	}
	return f.Executor.Apply(ctx, it)
}

func (f failOn) Validate(ctx context.Context, items []item.Item) error {
	return f.Executor.(tuning.Validator).Validate(ctx, items)
}

func TestFailureHalfwayRecordsExactlyWhatWasAppliedAndRerunFinishes(t *testing.T) {
	root := tempHost(t)
	exs := tempHostExecutors(root)
	st := openTestStore(t, filepath.Join(t.TempDir(), "state.db"))
	original := snapshot(t, root)

	failing := tempHostExecutors(root)
	failing[item.KindSysctl] = failOn{Executor: exs[item.KindSysctl], key: "net.ipv4.tcp_congestion_control"}
	p := mustPlan(t, st, failing, wanTuning())
	res, err := Apply(context.Background(), st, failing, p)
	if err == nil || !strings.Contains(err.Error(), "~ sysctl/net.ipv4.tcp_congestion_control: injected failure") {
		t.Fatalf("apply error = %v", err)
	}
	// Plan order: sysctl keys sorted, then irq, then relay.
	if len(res.Done) != 1 || res.Done[0].Key != "net.core.rmem_max" {
		t.Fatalf("done = %+v", res.Done)
	}
	recs, _ := st.Records()
	got := map[string]store.Record{}
	for _, r := range recs {
		got[r.ID()] = r
	}
	if r := got["sysctl/net.core.rmem_max"]; !r.Applied || r.Previous != "212992" {
		t.Errorf("applied item record %+v", r)
	}
	if r := got["sysctl/net.ipv4.tcp_congestion_control"]; r.Applied || r.Previous != "cubic" || r.Desired != "bbr" {
		t.Errorf("failed item record %+v", r)
	}
	if len(got) != 2 {
		t.Errorf("records beyond the failure: %+v", recs)
	}
	h, _ := st.History()
	if len(h) != 1 || h[0].Result != store.ResultFailed || !strings.Contains(h[0].Error, "injected failure") {
		t.Fatalf("history %+v", h)
	}
	if snap := snapshot(t, root); snap["proc/sys/net/ipv4/tcp_rmem"] != original["proc/sys/net/ipv4/tcp_rmem"] {
		t.Error("an item after the failure was applied")
	}

	// A re-run with a working host finishes the job.
	rerun := mustPlan(t, st, exs, wanTuning())
	if !strings.Contains(rerun.Text(), "finish the apply interrupted at serial 1") {
		t.Errorf("re-run plan:\n%s", rerun.Text())
	}
	mustApply(t, st, exs, rerun)
	if p := mustPlan(t, st, exs, wanTuning()); !p.Empty() {
		t.Fatalf("not converged after re-run:\n%s", p.Text())
	}
	if _, res, err := Rollback(context.Background(), st, exs, "node-a"); err != nil || res.Serial != 3 {
		t.Fatalf("rollback: %+v %v", res, err)
	}
	if snap := snapshot(t, root); fmt.Sprint(snap) != fmt.Sprint(original) {
		t.Fatalf("rollback did not restore the host:\n%v\nwant\n%v", snap, original)
	}
}

func TestRollbackRestoresOriginalValuesAndIsRecorded(t *testing.T) {
	ctx := context.Background()
	root := tempHost(t)
	exs := tempHostExecutors(root)
	st := openTestStore(t, filepath.Join(t.TempDir(), "state.db"))
	original := snapshot(t, root)

	mustApply(t, st, exs, mustPlan(t, st, exs, wanTuning()))
	// A second configuration drops tcp_rmem and changes rmem_max: the
	// values recorded first must survive it.
	second := []item.Item{
		sysctlItem("net.core.rmem_max", "268435456"),
		sysctlItem("net.core.wmem_max", "268435456"),
		{Kind: item.KindIRQ, Key: "eth1", Value: "0"},
	}
	p := mustPlan(t, st, exs, second)
	if !strings.Contains(p.Text(), "- net.ipv4.tcp_rmem") {
		t.Errorf("second plan:\n%s", p.Text())
	}
	mustApply(t, st, exs, p)
	if r, _, _ := st.Record(item.KindSysctl, "net.core.rmem_max"); r.Previous != "212992" || r.FirstSerial != 1 || r.Serial != 2 {
		t.Errorf("rmem_max record after second apply %+v", r)
	}

	rp, err := PlanRollback(ctx, st, exs, "node-a", ForgetGone{})
	if err != nil {
		t.Fatal(err)
	}
	if rp.Operation != plan.OperationRollback || !strings.HasPrefix(rp.Text(), "Rollback plan for node node-a at state serial 2") {
		t.Errorf("rollback plan:\n%s", rp.Text())
	}
	_, res, err := Rollback(ctx, st, exs, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if res.Serial != 3 {
		t.Errorf("rollback serial %d", res.Serial)
	}
	if snap := snapshot(t, root); fmt.Sprint(snap) != fmt.Sprint(original) {
		t.Fatalf("host after rollback:\n%v\nwant\n%v", snap, original)
	}
	if recs, _ := st.Records(); len(recs) != 0 {
		t.Fatalf("records after rollback: %+v", recs)
	}
	h, _ := st.History()
	if len(h) != 3 || h[2].Operation != plan.OperationRollback || h[2].Result != store.ResultOK || h[2].Serial != 3 {
		t.Fatalf("history %+v", h)
	}
	// Nothing left to roll back.
	if p, res, err := Rollback(ctx, st, exs, "node-a"); err != nil || !p.Empty() || res.Serial != 0 {
		t.Fatalf("second rollback: %+v %+v %v", p, res, err)
	}
}

// A built-in profile's fq qdisc is optional: on a kernel without fq the
// plan leaves it out with a warning saying why and plans the rest; written
// in the file it is required, and the plan fails as for any bad item.
func TestPlanLeavesOutOptionalItemsTheNodeCannotTake(t *testing.T) {
	root := tempHost(t)
	for p, content := range map[string]string{
		"proc/sys/net/core/default_qdisc": "pfifo_fast\n",
		"proc/sys/kernel/osrelease":       "6.1.0-test\n",
	} {
		os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755)
		if err := os.WriteFile(filepath.Join(root, p), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	exs := tempHostExecutors(root)
	st := openTestStore(t, filepath.Join(t.TempDir(), "state.db"))
	fq := item.Item{Kind: item.KindSysctl, Key: "net.core.default_qdisc", Value: "fq",
		Origin: "profile fasterdata-10g (sos.hcl:3)", Optional: true}
	rmem := sysctlItem("net.core.rmem_max", "134217728")
	rmem.Origin = "sos.hcl:5"

	p, err := Plan(context.Background(), st, exs, []item.Item{fq, rmem}, "node-a", "h")
	if err != nil {
		t.Fatalf("a profile's fq failed the plan on a kernel without it: %v", err)
	}
	if len(p.Changes) != 1 || p.Changes[0].Key != "net.core.rmem_max" || p.Changes[0].Origin != "sos.hcl:5" {
		t.Fatalf("changes:\n%s", p.Text())
	}
	if len(p.Warnings) != 1 || p.Warnings[0].Key != "net.core.default_qdisc" ||
		!strings.Contains(p.Warnings[0].Message, `left out "fq" from profile fasterdata-10g (sos.hcl:3)`) ||
		!strings.Contains(p.Warnings[0].Message, "the kernel shows no fq qdisc") {
		t.Fatalf("warnings = %+v", p.Warnings)
	}
	t.Logf("\n%s", p.Text())

	fq.Optional = false
	if _, err := Plan(context.Background(), st, exs, []item.Item{fq, rmem}, "node-a", "h"); err == nil ||
		!strings.Contains(err.Error(), "the kernel shows no fq qdisc") {
		t.Fatalf("fq from the file on a kernel without it: %v", err)
	}

	if err := os.MkdirAll(filepath.Join(root, "sys/module/sch_fq"), 0o755); err != nil {
		t.Fatal(err)
	}
	fq.Optional = true
	p, err = Plan(context.Background(), st, exs, []item.Item{fq, rmem}, "node-a", "h")
	if err != nil || len(p.Changes) != 2 || len(p.Warnings) != 0 {
		t.Fatalf("with sch_fq loaded: %v\n%s", err, p.Text())
	}
}
