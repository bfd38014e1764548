package appliance

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/appliance/desired"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestSameNodeNameInStatus: two daemons run as one node name against one
// etcd; each one's `status` says another process publishes as it, naming
// the other's host and pid.
func TestSameNodeNameInStatus(t *testing.T) {
	t.Parallel() // its own etcd and daemon; mostly waiting for leases (see the Makefile's -parallel)
	etcd := testsupport.StartEtcd(t, 1)
	var ds []*Daemon
	for range 2 {
		d, err := NewDaemon(Options{ConfigPath: "unused.hcl", Node: "ctl-a", Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		rc := swapInCluster(t, d, &desired.Cluster{
			Endpoints: etcd.Endpoints(), Prefix: "/sos-dup/", LeaseTTL: 2 * time.Second, DialTimeout: time.Second})
		t.Cleanup(rc.close)
		ds = append(ds, d)
	}
	testsupport.Eventually(t, 20*time.Second, "both daemons say the name is used twice", func() bool {
		for _, d := range ds {
			if c := d.Status().Cluster; c == nil || !strings.Contains(c.Duplicate, "pid ") {
				return false
			}
		}
		return true
	})
	var b bytes.Buffer
	st := ds[0].Status()
	st.WriteText(&b)
	if want := "also published by another process (" + st.Cluster.Duplicate + "): node names must be unique"; !strings.Contains(b.String(), want) {
		t.Errorf("status text lacks %q:\n%s", want, b.String())
	}
}
