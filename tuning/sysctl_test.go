package tuning

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/host/item"
)

// sysctlTree is a /proc/sys shaped tree as the kernel prints it.
func sysctlTree(t *testing.T) string {
	root := t.TempDir()
	writeTree(t, root, map[string]string{
		"proc/sys/net/core/rmem_max":                         "212992\n",
		"proc/sys/net/ipv4/tcp_rmem":                         "4096\t131072\t6291456\n",
		"proc/sys/net/ipv4/tcp_congestion_control":           "cubic\n",
		"proc/sys/net/ipv4/tcp_available_congestion_control": "reno cubic\n",
		"proc/sys/net/ipv4/tcp_allowed_congestion_control":   "reno cubic\n",
		"proc/sys/net/ipv4/conf/eth1.100/rp_filter":          "1\n",
		"proc/sys/net/ipv4/conf/eth1/rp_filter":              "1\n",
		"proc/sys/net/ipv4/conf/eth1/accept_local":           "0\n",
		"proc/sys/net/ipv4/neigh/default/gc_thresh1":         "128\n",
	})
	return root
}

func TestSysctlObserveApplyInTempTree(t *testing.T) {
	ctx := context.Background()
	root := sysctlTree(t)
	ex := NewSysctl(root)
	items := []item.Item{
		{Kind: item.KindSysctl, Key: "net.ipv4.tcp_rmem", Value: "4096 87380 67108864"},
		{Kind: item.KindSysctl, Key: "net.core.rmem_max", Value: "134217728"},
		{Kind: item.KindSysctl, Key: "net.ipv4.conf.eth1/100.rp_filter", Value: "2"},
		{Kind: item.KindSysctl, Key: "net.ipv4.gone", Value: "1"},
	}
	obs, err := ex.Observe(ctx, items)
	if err != nil {
		t.Fatal(err)
	}
	want := []item.Observation{
		{Item: item.Item{Kind: item.KindSysctl, Key: "net.ipv4.tcp_rmem", Value: "4096 131072 6291456"}, Present: true},
		{Item: item.Item{Kind: item.KindSysctl, Key: "net.core.rmem_max", Value: "212992"}, Present: true},
		{Item: item.Item{Kind: item.KindSysctl, Key: "net.ipv4.conf.eth1/100.rp_filter", Value: "1"}, Present: true},
		{Item: item.Item{Kind: item.KindSysctl, Key: "net.ipv4.gone"}},
	}
	for i := range want {
		if obs[i].Item != want[i].Item || obs[i].Present != want[i].Present {
			t.Errorf("observation %d = %+v, want %+v", i, obs[i], want[i])
		}
	}
	for _, it := range items[:3] {
		if err := ex.Apply(ctx, it); err != nil {
			t.Fatal(err)
		}
	}
	if got := readTree(t, root, "proc/sys/net/ipv4/tcp_rmem"); got != "4096 87380 67108864\n" {
		t.Errorf("tcp_rmem file = %q", got)
	}
	if got := readTree(t, root, "proc/sys/net/ipv4/conf/eth1.100/rp_filter"); got != "2\n" {
		t.Errorf("vlan rp_filter = %q", got)
	}
	if err := ex.Apply(ctx, items[3]); err == nil {
		t.Error("Apply of a missing key succeeded")
	}
	if _, err := os.Stat(filepath.Join(root, "proc/sys/net/ipv4/gone")); err == nil {
		t.Error("Apply created a missing key")
	}
	if err := ex.Remove(ctx, items[0]); err == nil {
		t.Error("Remove of a sysctl succeeded")
	}
}

func TestSysctlValidateNamesEveryBadKey(t *testing.T) {
	ex := NewSysctl(sysctlTree(t))
	err := ex.Validate(context.Background(), []item.Item{
		{Kind: item.KindSysctl, Key: "net.core.rmem_max", Value: "1"},
		{Kind: item.KindSysctl, Key: "net.core.no_such", Value: "1"},
		{Kind: item.KindSysctl, Key: "net.ipv4.conf.eth1", Value: "1"},
		{Kind: item.KindSysctl, Key: "net..x", Value: "1"},
		{Kind: item.KindSysctl, Key: "net.core.//.y", Value: "1"},
		{Kind: item.KindSysctl, Key: "net.core.rmem_max", Value: "  "},
		{Kind: item.KindSysctl, Key: "net.ipv4.tcp_nope", Value: "1"},
	})
	if err == nil {
		t.Fatal("Validate accepted bad keys")
	}
	for _, want := range []string{
		"sysctl net.core.no_such does not exist on this node",
		"net.ipv4.conf.eth1 is a directory",
		`"net..x" is malformed`,
		`"net.core.//.y" is malformed`,
		"net.core.rmem_max: empty value",
		"sysctl net.ipv4.tcp_nope does not exist",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate error lacks %q:\n%v", want, err)
		}
	}
}

// fakeModprobe writes a modprobe stand-in: a shell script that logs each
// call and, for modules named in registers, adds the algorithm to the tree's
// available list the way loading the module would.
func fakeModprobe(t *testing.T, root string, registers ...string) (cmd []string, calls func() []string) {
	log := filepath.Join(t.TempDir(), "calls")
	script := `echo "$1" >> ` + log + "\n" + `case "$1" in` + "\n"
	for _, m := range registers {
		script += m + `) printf ' %s' "${1#tcp_}" >> ` + filepath.Join(root, "proc/sys/net/ipv4/tcp_available_congestion_control") + "; exit 0;;\n"
	}
	script += `esac` + "\n" + `echo "modprobe: FATAL: Module $1 not found" >&2; exit 1` + "\n"
	return []string{"sh", "-c", script, "modprobe"}, func() []string {
		b, _ := os.ReadFile(log)
		return strings.Fields(string(b))
	}
}

func TestSysctlCongestionControlTriesModprobeOnce(t *testing.T) {
	ctx := context.Background()
	root := sysctlTree(t)
	ex := NewSysctl(root)
	var calls func() []string
	ex.Modprobe, calls = fakeModprobe(t, root, "tcp_htcp")
	// Make the available file end without a newline so the script's append
	// reads like the kernel's list.
	writeTree(t, root, map[string]string{"proc/sys/net/ipv4/tcp_available_congestion_control": "reno cubic"})

	cc := func(name string) []item.Item {
		return []item.Item{{Kind: item.KindSysctl, Key: keyCongestionControl, Value: name}}
	}
	if err := ex.Validate(ctx, cc("cubic")); err != nil {
		t.Fatalf("available algorithm: %v", err)
	}
	if len(calls()) != 0 {
		t.Fatalf("modprobe ran for an available algorithm: %v", calls())
	}
	if err := ex.Validate(ctx, cc("htcp")); err != nil {
		t.Fatalf("algorithm loadable by modprobe: %v", err)
	}
	err := ex.Validate(ctx, cc("vegas"))
	if err == nil || !strings.Contains(err.Error(), `net.ipv4.tcp_congestion_control = "vegas": congestion control not available (have: reno cubic htcp) and modprobe tcp_vegas failed`) ||
		!strings.Contains(err.Error(), "Module tcp_vegas not found") {
		t.Fatalf("missing algorithm: %v", err)
	}
	if err := ex.Validate(ctx, cc("vegas")); err == nil {
		t.Fatal("second validation of a missing algorithm passed")
	}
	if got := strings.Join(calls(), " "); got != "tcp_htcp tcp_vegas" {
		t.Fatalf("modprobe calls = %q, want one per module", got)
	}
}

// TestPerInterfaceSysctlGone: a parameter of an interface that is not
// there is refused as gone (tuning.ErrGone), so the daemon's drift check
// holds it; an unknown parameter of an interface that is there, or a
// global one, is a plain refusal.
func TestPerInterfaceSysctlGone(t *testing.T) {
	root := t.TempDir()
	for _, p := range []string{"proc/sys/net/ipv4/conf/eth1/rp_filter", "proc/sys/net/core/rmem_max"} {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte("1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := NewSysctl(root)
	for key, gone := range map[string]bool{
		"net.ipv4.conf.eth9.rp_filter":    true,
		"net.ipv6.conf.eth9.accept_ra":    true,
		"net.ipv4.neigh.eth9.gc_stale":    true,
		"net.ipv4.conf.eth1.no_such_knob": false,
		"net.ipv4.conf.all.no_such_knob":  false,
		"net.core.no_such_knob":           false,
	} {
		err := s.Validate(context.Background(), []item.Item{{Kind: item.KindSysctl, Key: key, Value: "1"}})
		if err == nil {
			t.Errorf("%s: accepted", key)
			continue
		}
		if errors.Is(err, ErrGone) != gone {
			t.Errorf("%s: %v; gone = %v, want %v", key, err, errors.Is(err, ErrGone), gone)
		}
	}
}
