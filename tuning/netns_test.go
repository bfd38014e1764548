package tuning

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/host/item"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

func TestInterfaceMTUAndTxQueueLenOnVethInNetns(t *testing.T) {
	if !testsupport.InFreshNetns(t, "ip") {
		return
	}
	ctx := context.Background()
	run(t, "ip", "link", "add", "sosv0", "type", "veth", "peer", "name", "sosv1")
	ex := NewInterface()
	items := []item.Item{
		{Kind: item.KindInterface, Key: item.InterfaceKey("sosv0", item.SettingMTU), Value: "9000"},
		{Kind: item.KindInterface, Key: item.InterfaceKey("sosv0", item.SettingTxQueueLen), Value: "5000"},
	}
	if err := ex.Validate(ctx, items); err != nil {
		t.Fatal(err)
	}
	before, err := ex.Observe(ctx, items)
	if err != nil {
		t.Fatal(err)
	}
	if !before[0].Present || before[0].Value != "1500" || before[1].Value != "1000" {
		t.Fatalf("veth defaults observed as %+v", before)
	}
	for _, it := range items {
		if err := ex.Apply(ctx, it); err != nil {
			t.Fatal(err)
		}
	}
	link := run(t, "ip", "link", "show", "sosv0")
	if !strings.Contains(link, "mtu 9000") || !strings.Contains(link, "qlen 5000") {
		t.Fatalf("ip link show sosv0:\n%s", link)
	}
	after, err := ex.Observe(ctx, items)
	if err != nil {
		t.Fatal(err)
	}
	if after[0].Value != "9000" || after[1].Value != "5000" {
		t.Fatalf("observed after apply: %+v", after)
	}
	// Rollback is Apply of the previous values.
	for _, o := range before {
		if err := ex.Apply(ctx, o.Item); err != nil {
			t.Fatal(err)
		}
	}
	if link := run(t, "ip", "link", "show", "sosv0"); !strings.Contains(link, "mtu 1500") || !strings.Contains(link, "qlen 1000") {
		t.Fatalf("after restore:\n%s", link)
	}

	missing := item.Item{Kind: item.KindInterface, Key: "nosuch0/mtu", Value: "9000"}
	if o := observeOne(t, ex, missing); o.Present {
		t.Fatalf("missing interface observed present: %+v", o)
	}
	err = ex.Validate(ctx, []item.Item{missing, {Kind: item.KindInterface, Key: "sosv0/speed", Value: "1"}, {Kind: item.KindInterface, Key: "sosv0/mtu", Value: "20"}})
	for _, want := range []string{"nosuch0", "sosv0/speed", "below the IPv4 minimum"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate error %v does not mention %q", err, want)
		}
	}
	if err := ex.Remove(ctx, items[0]); err == nil {
		t.Error("Remove of an interface setting succeeded")
	}
}

func TestPerNamespaceSysctlsInNetns(t *testing.T) {
	if !testsupport.InFreshNetns(t, "sysctl") {
		return
	}
	ctx := context.Background()
	ex := NewSysctl("/")
	available, err := ex.availableCongestionControls()
	if err != nil {
		t.Fatal(err)
	}
	allowed := strings.Fields(run(t, "sysctl", "-n", "net.ipv4.tcp_allowed_congestion_control"))
	current := strings.TrimSpace(run(t, "sysctl", "-n", keyCongestionControl))
	other := ""
	for _, cc := range allowed {
		if cc != current {
			other = cc
		}
	}
	testsupport.Require(t, other != "", "only one congestion control available (%v)", available)
	items := []item.Item{
		{Kind: item.KindSysctl, Key: "net.ipv4.tcp_rmem", Value: "4096  87380\t67108864"},
		{Kind: item.KindSysctl, Key: keyCongestionControl, Value: other},
	}
	if err := ex.Validate(ctx, items); err != nil {
		t.Fatal(err)
	}
	before, err := ex.Observe(ctx, items)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		if err := ex.Apply(ctx, it); err != nil {
			t.Fatal(err)
		}
	}
	if got := run(t, "sysctl", "-n", "net.ipv4.tcp_rmem"); strings.Join(strings.Fields(got), " ") != "4096 87380 67108864" {
		t.Errorf("sysctl -n net.ipv4.tcp_rmem = %q", got)
	}
	if got := strings.TrimSpace(run(t, "sysctl", "-n", keyCongestionControl)); got != other {
		t.Errorf("congestion control = %q, want %q", got, other)
	}
	for _, o := range before {
		if err := ex.Apply(ctx, o.Item); err != nil {
			t.Fatal(err)
		}
	}
	if got := strings.TrimSpace(run(t, "sysctl", "-n", keyCongestionControl)); got != current {
		t.Errorf("after restore congestion control = %q, want %q", got, current)
	}

	// An algorithm that no module provides fails at plan time, after one
	// real modprobe attempt, with a message naming it.
	bogus := item.Item{Kind: item.KindSysctl, Key: keyCongestionControl, Value: "sosnosuchcc"}
	err = ex.Validate(ctx, []item.Item{bogus, {Kind: item.KindSysctl, Key: "net.ipv4.sos_no_such_key", Value: "1"}})
	for _, want := range []string{`"sosnosuchcc": congestion control not available`, "modprobe tcp_sosnosuchcc failed", "net.ipv4.sos_no_such_key does not exist"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate error %v does not contain %q", err, want)
		}
	}

	// An algorithm the kernel has but only the host namespace may use is
	// refused at plan time instead of failing with EPERM at apply.
	for _, cc := range available {
		if slices.Contains(allowed, cc) {
			continue
		}
		err := ex.Validate(ctx, []item.Item{{Kind: item.KindSysctl, Key: keyCongestionControl, Value: cc}})
		if err == nil || !strings.Contains(err.Error(), "may only use allowed congestion controls") {
			t.Errorf("Validate(%s) in a namespace = %v", cc, err)
		}
	}
}
