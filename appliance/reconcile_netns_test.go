package appliance

import (
	"context"
	"net/netip"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/host/item"
	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/tuning"
)

func cmdOut(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// hostState is what sysctl, ip and nft report for everything the test
// applies.
func hostState(t *testing.T) map[string]string {
	t.Helper()
	nft, _ := exec.Command("nft", "list", "table", "ip", tuning.SteeringTable).CombinedOutput()
	return map[string]string{
		"tcp_rmem":    strings.Join(strings.Fields(cmdOut(t, "sysctl", "-n", "net.ipv4.tcp_rmem")), " "),
		"cc":          cmdOut(t, "sysctl", "-n", "net.ipv4.tcp_congestion_control"),
		"rp_filter":   cmdOut(t, "sysctl", "-n", "net.ipv4.conf.sosr0.rp_filter"),
		"link":        cmdOut(t, "ip", "-o", "link", "show", "sosr0"),
		"rules":       cmdOut(t, "ip", "rule", "show"),
		"route table": cmdOut(t, "ip", "route", "show", "table", "all", "proto", "83"),
		"nft":         string(nft),
	}
}

// TestApplyAndRollbackInNetns drives the whole engine in a fresh network
// namespace: per-namespace sysctls, MTU and txqueuelen on a veth, and the
// steering state; it reads them back with sysctl, ip and nft, checks that a
// second plan is empty, and that rollback restores every original.
func TestApplyAndRollbackInNetns(t *testing.T) {
	if !testsupport.InFreshNetns(t, "sysctl", "ip", "nft") {
		return
	}
	ctx := context.Background()
	cmdOut(t, "ip", "link", "add", "sosr0", "type", "veth", "peer", "name", "sosr1")
	original := hostState(t)

	allowed := strings.Fields(cmdOut(t, "sysctl", "-n", "net.ipv4.tcp_allowed_congestion_control"))
	cc := ""
	for _, a := range allowed {
		if a != original["cc"] {
			cc = a
		}
	}
	testsupport.Require(t, cc != "", "no second allowed congestion control in %v", allowed)
	steering, err := item.SteeringSpec{
		Interface:  "sosr0",
		ListenPort: 9876,
		Divert: []item.Divert{{
			Clients: []netip.Prefix{netip.MustParsePrefix("10.20.1.0/24")},
			Server:  netip.MustParseAddr("10.20.2.1"),
			Port:    5201,
		}},
	}.Items()
	if err != nil {
		t.Fatal(err)
	}
	desired := append([]item.Item{
		sysctlItem("net.ipv4.tcp_rmem", "4096 87380 67108864"),
		sysctlItem("net.ipv4.tcp_congestion_control", cc),
		{Kind: item.KindInterface, Key: "sosr0/mtu", Value: "9000"},
		{Kind: item.KindInterface, Key: "sosr0/txqueuelen", Value: "10000"},
	}, steering...)

	exs := tuning.Executors("/")
	st := openTestStore(t, filepath.Join(t.TempDir(), "state.db"))
	p, res, err := Converge(ctx, st, exs, desired, "agent-a", "h1")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("applied:\n%s", p.Text())
	if len(res.Done) != len(desired) {
		t.Errorf("applied %d changes, want %d", len(res.Done), len(desired))
	}

	got := hostState(t)
	checks := map[string][]string{
		"tcp_rmem":    {"4096 87380 67108864"},
		"cc":          {cc},
		"rp_filter":   {"2"},
		"link":        {"mtu 9000", "qlen 10000"},
		"rules":       {"from all fwmark 0x534f lookup 21327 proto 83"},
		"route table": {"local default dev lo table 21327 scope host"},
		"nft": {
			"socket transparent 1 meta mark set 0x0000534f accept",
			`iifname "sosr0" ip saddr @clients0 ip daddr @servers0 tcp dport @ports0 tcp flags syn / fin,syn,rst,ack meta mark set 0x0000534f tproxy to :9876 accept`,
			"elements = { 10.20.1.0/24 }", "elements = { 10.20.2.1 }", "elements = { 5201 }",
		},
	}
	for what, wants := range checks {
		for _, want := range wants {
			if !strings.Contains(got[what], want) {
				t.Errorf("%s after apply lacks %q:\n%s", what, want, got[what])
			}
		}
	}
	if p := mustPlan(t, st, exs, desired); !p.Empty() {
		t.Fatalf("second plan not empty:\n%s", p.Text())
	}

	// Dropping the steering from the configuration removes exactly it.
	p, _, err = Converge(ctx, st, exs, desired[:4], "agent-a", "h2")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, restore := p.Counts(); restore != len(steering) {
		t.Errorf("dropping steering planned %d restores:\n%s", restore, p.Text())
	}
	got = hostState(t)
	if got["nft"] != original["nft"] || got["rules"] != original["rules"] || got["route table"] != original["route table"] || got["rp_filter"] != original["rp_filter"] {
		t.Errorf("steering left behind:\n%v\noriginal:\n%v", got, original)
	}

	if _, _, err := Rollback(ctx, st, exs, "agent-a"); err != nil {
		t.Fatal(err)
	}
	got = hostState(t)
	for _, what := range slices.Sorted(func(yield func(string) bool) {
		for k := range original {
			if !yield(k) {
				return
			}
		}
	}) {
		if got[what] != original[what] {
			t.Errorf("%s after rollback:\n%s\nwant\n%s", what, got[what], original[what])
		}
	}
}
