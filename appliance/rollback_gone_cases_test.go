package appliance

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/host/item"
	"github.com/sosappliance/sosappliance/tuning"
)

// holdConfigNoEth1 is holdConfig without eth1: its items are no longer
// desired, so their records are to be put back.
func holdConfigNoEth1(rmem string) string {
	return `
security { psk_file = "/etc/sosappliance/psk" }
site "a" { prefixes = ["10.1.0.0/24"] }
tuning "t" {
  sysctl = { "net.core.rmem_max" = "` + rmem + `" }
}
node "host1" { tuning = ["t"] }
`
}

// Found by review: the README says a held item is "logged once". A record held
// because eth1 is away and the file no longer names it is logged by the
// first drift check; an accepted reload (an unrelated edit) then clears
// d.held (recordApply: err == nil), and the next drift check logs the
// same held record again, once per accepted reload.
func TestHeldRecordLoggedOnceAcrossAcceptedReloads(t *testing.T) {
	td, root, cfgPath := startHoldDaemon(t, 200*time.Millisecond)

	dev := filepath.Join(root, "sys/class/net/eth1")
	if err := os.Rename(dev, dev+".gone"); err != nil {
		t.Fatal(err)
	}
	// The file drops eth1 while it is away: accepted, its record held.
	writeFile(t, cfgPath, holdConfigNoEth1("100001"))
	td.waitFor("the edit applied", func() bool { return td.sysctl("net.core.rmem_max") == "100001" })
	const logged = `warning="irq eth1: held, to be put back`
	td.waitFor("the held record logged", func() bool { return strings.Count(td.logs.String(), logged) >= 1 })

	// Unrelated edits, each accepted, with drift checks in between.
	for _, v := range []string{"100002", "100003"} {
		writeFile(t, cfgPath, holdConfigNoEth1(v))
		td.waitFor("edit "+v+" applied", func() bool { return td.sysctl("net.core.rmem_max") == v })
		time.Sleep(700 * time.Millisecond)
	}
	st := td.status()
	if !containsPrefix(st.Warnings, "irq eth1: held, to be put back") {
		t.Errorf("held record not in status: %q", st.Warnings)
	}
	if n := strings.Count(td.logs.String(), logged); n != 1 {
		t.Errorf("the held record was logged %d times while it stayed held through two accepted reloads, want once", n)
	}
}

func containsPrefix(ws []string, prefix string) bool {
	for _, w := range ws {
		if strings.HasPrefix(w, prefix) {
			return true
		}
	}
	return false
}

// Found by review: a plan saved while eth1 is present plans the restore of its
// items (the file no longer names them); eth1 goes away before the plan
// file is applied. What does ApplySaved do with the records?
func TestSavedPlanRestoreOfAnInterfaceGoneSinceKeepsRecords(t *testing.T) {
	ctx := context.Background()
	root := tempHost(t)
	exs := tempHostExecutors(root)
	st := openTestStore(t, filepath.Join(t.TempDir(), "state.db"))
	mustApply(t, st, exs, mustPlan(t, st, exs, holdItems()))
	withoutEth1 := []item.Item{{Kind: item.KindSysctl, Key: "net.core.rmem_max", Value: "100001"}}
	p := mustPlan(t, st, exs, withoutEth1)
	t.Logf("saved plan:\n%s", p.Text())
	takeEth1Away(t, root)
	res, err := ApplySaved(ctx, st, exs, p, "node-a")
	t.Logf("apply saved while eth1 is away: done %d, err %v", len(res.Done), err)
	for _, k := range [][2]string{{item.KindIRQ, "eth1"}, {item.KindSysctl, "net.ipv4.conf.eth1.rp_filter"}} {
		if _, ok := recordOf(t, st, k[0], k[1]); !ok {
			t.Errorf("%s %s: record forgotten by a saved plan applied while its interface was away", k[0], k[1])
		}
	}
}

// Found by review: gone() validates every record no longer desired, and the
// sysctl executor's Validate of tcp_congestion_control runs modprobe
// for an algorithm that is not available. Planning a rollback (which
// puts back cubic) now loads tcp_bbr on the host: planning is meant to
// change nothing, and the rollback does not even want bbr.
func TestRollbackPlanningRunsNoModprobe(t *testing.T) {
	ctx := context.Background()
	root := tempHost(t)
	exs := tempHostExecutors(root)
	marker := filepath.Join(t.TempDir(), "modprobed")
	script := filepath.Join(t.TempDir(), "modprobe.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho \"$@\" >> "+marker+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	st := openTestStore(t, filepath.Join(t.TempDir(), "state.db"))
	mustApply(t, st, exs, mustPlan(t, st, exs, []item.Item{{Kind: item.KindSysctl, Key: "net.ipv4.tcp_congestion_control", Value: "bbr"}}))

	// Someone put cubic back and unloaded tcp_bbr.
	writeFile(t, filepath.Join(root, "proc/sys/net/ipv4/tcp_congestion_control"), "cubic\n")
	writeFile(t, filepath.Join(root, "proc/sys/net/ipv4/tcp_available_congestion_control"), "reno cubic\n")
	// A fresh executor (as a new CLI process has), whose modprobe is the script.
	fresh := tuning.NewSysctl(root)
	fresh.Modprobe = []string{script}
	exs[item.KindSysctl] = fresh

	p, err := PlanRollback(ctx, st, exs, "node-a", ForgetGone{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("rollback plan:\n%s", p.Text())
	if b, err := os.ReadFile(marker); err == nil {
		t.Errorf("planning a rollback ran modprobe %s", strings.TrimSpace(string(b)))
	}
}

// Coverage: TestSavedRollbackRestoresAnItemThatCameBack no
// longer reaches restoreItem's "look again now" path, since a plan made
// while eth1 is away holds its record. That path is now reached by
// rollback --forget-gone: a plan made while eth1 is away plans the
// restore ("gone from the host; forget its record"); eth1 is back by
// the time it is applied, still holding the appliance's values: they
// are put back, not forgotten.
func TestForgetGoneRollbackPutsBackAnInterfaceBackByApply(t *testing.T) {
	ctx := context.Background()
	h := applyHoldItems(t)
	root, exs, st, before := h.root, h.exs, h.st, h.before
	back := takeEth1Away(t, root)
	p, err := PlanRollback(ctx, st, exs, "node-a", ForgetGone{All: true})
	if err != nil {
		t.Fatal(err)
	}
	back()
	if _, err := Apply(ctx, st, exs, p); err != nil {
		t.Fatal(err)
	}
	if got := eth1Values(t, root); got != before {
		t.Errorf("eth1 after a --forget-gone rollback planned while it was away and applied once back: %q, want %q", got, before)
	}
	if recs, _ := st.Records(); len(recs) != 0 {
		t.Errorf("records left: %+v", recs)
	}
}
