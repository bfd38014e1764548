package appliance

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/appliance/plan"
	"github.com/sosappliance/sosappliance/appliance/store"
	"github.com/sosappliance/sosappliance/host/item"
	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/tuning"
)

func openTestStore(t *testing.T, path string) *store.Store {
	t.Helper()
	st, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// tempHost is a host tree shaped like /proc/sys, /proc/irq, /sys/class/net
// and /sys/devices/system/cpu of a 4-CPU node with interface eth1 (MSI-X
// IRQs 40-43).
func tempHost(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	files := map[string]string{
		"proc/sys/net/core/rmem_max":                         "212992\n",
		"proc/sys/net/core/wmem_max":                         "212992\n",
		"proc/sys/net/ipv4/tcp_rmem":                         "4096\t131072\t6291456\n",
		"proc/sys/net/ipv4/tcp_wmem":                         "4096\t16384\t4194304\n",
		"proc/sys/net/ipv4/tcp_mtu_probing":                  "0\n",
		"proc/sys/net/ipv4/tcp_congestion_control":           "cubic\n",
		"proc/sys/net/ipv4/tcp_available_congestion_control": "reno cubic bbr\n",
		"proc/sys/net/ipv4/tcp_allowed_congestion_control":   "reno cubic bbr\n",
		"proc/sys/net/ipv4/conf/eth1/rp_filter":              "1\n",
		"sys/devices/system/cpu/online":                      "0-3\n",
		"proc/irq/40/smp_affinity_list":                      "0-3\n",
		"proc/irq/41/smp_affinity_list":                      "0-3\n",
		"proc/irq/42/smp_affinity_list":                      "1\n",
		"proc/irq/43/smp_affinity_list":                      "0-3\n",
	}
	for irq := 40; irq <= 43; irq++ {
		files["sys/class/net/eth1/device/msi_irqs/"+strconv.Itoa(irq)] = "msix\n"
	}
	testsupport.WriteTree(t, root, files)
	return root
}

// tempHostExecutors are the file-tree executors over root.
func tempHostExecutors(root string) map[string]tuning.Executor {
	return map[string]tuning.Executor{
		item.KindSysctl: tuning.NewSysctl(root),
		item.KindIRQ:    tuning.NewIRQ(root),
		item.KindRelay:  tuning.NewRelay(root),
	}
}

// snapshot reads every file of the tree with blanks normalised, which is
// how the kernel compares them too.
func snapshot(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		out[rel] = strings.Join(strings.Fields(string(b)), " ")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func mustPlan(t *testing.T, st *store.Store, exs map[string]tuning.Executor, desired []item.Item) plan.Plan {
	t.Helper()
	p, err := Plan(context.Background(), st, exs, desired, "node-a", "hash")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func mustApply(t *testing.T, st *store.Store, exs map[string]tuning.Executor, p plan.Plan) Result {
	t.Helper()
	res, err := Apply(context.Background(), st, exs, p)
	if err != nil {
		t.Fatal(err)
	}
	return res
}
