package tuning

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/sosappliance/sosappliance/host/item"
)

// TestGoneObjectNamesTheInterface: each executor whose items name an
// interface says, in its ErrGone refusal, which interface is gone, as
// --forget-gone=IFACE matches it: the sysctl's per-interface directory
// (a VLAN's dotted name from its "/" form), the irq item's interface, the
// interface item's. Other errors name none.
func TestGoneObjectNamesTheInterface(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "proc/sys/net/ipv4/conf/all"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "sys/class/net"), 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		ex   GoneChecker
		it   item.Item
		want string
	}{
		{&Sysctl{Root: root}, item.Item{Kind: "sysctl", Key: "net.ipv4.conf.eth7.rp_filter", Value: "2"}, "eth7"},
		{&Sysctl{Root: root}, item.Item{Kind: "sysctl", Key: "net.ipv4.conf.eth1/100.rp_filter", Value: "2"}, "eth1.100"},
		{&IRQ{Root: root}, item.Item{Kind: "irq", Key: "eth5", Value: "2"}, "eth5"},
		{&Interface{}, item.Item{Kind: "interface", Key: "sosgone0/mtu", Value: "9000"}, "sosgone0"},
	}
	for _, c := range cases {
		err := c.ex.Gone(ctx, c.it)
		if !errors.Is(err, ErrGone) {
			t.Errorf("%s %s: Gone says %v, want ErrGone", c.it.Kind, c.it.Key, err)
			continue
		}
		if got := GoneObject(err); got != c.want {
			t.Errorf("%s %s: GoneObject %q, want %q (%v)", c.it.Kind, c.it.Key, got, c.want, err)
		}
		if got := GoneObject(errors.Join(errors.New("other"), err)); got != c.want {
			t.Errorf("%s %s: GoneObject of a joined error %q, want %q", c.it.Kind, c.it.Key, got, c.want)
		}
	}
	if got := GoneObject(errors.New("interface eth1: permission denied")); got != "" {
		t.Errorf("GoneObject of another error: %q", got)
	}
}
