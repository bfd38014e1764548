package appliance

import (
	"log/slog"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/sosappliance/sosappliance/appliance/desired"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// gauge reads one metric of the daemon's registry; ok is false when it is
// not exported.
func gauge(t *testing.T, d *Daemon, name string) (float64, bool) {
	t.Helper()
	families, err := d.met.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name || len(f.Metric) == 0 {
			continue
		}
		m := f.Metric[0]
		switch f.GetType() {
		case dto.MetricType_GAUGE:
			return m.GetGauge().GetValue(), true
		case dto.MetricType_COUNTER:
			return m.GetCounter().GetValue(), true
		}
	}
	return 0, false
}

// TestClusterMetricsAndStatus runs a controller node's cluster part on a
// real etcd: it leads, and status and metrics say so; with etcd killed it
// steps down when its lease expires, and status and metrics say that too.
func TestClusterMetricsAndStatus(t *testing.T) {
	// Not parallel: 2 s leases and an exact step-down count.
	etcd := testsupport.StartEtcd(t, 1)
	d, err := NewDaemon(Options{ConfigPath: "unused.hcl", Node: "ctl-a", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := gauge(t, d, "sosappliance_cluster_master"); ok {
		t.Errorf("cluster metrics without a cluster")
	}
	rc := swapInCluster(t, d, &desired.Cluster{
		Endpoints: etcd.Endpoints(), Prefix: "/sos-metrics/", LeaseTTL: 2 * time.Second, DialTimeout: time.Second})
	t.Cleanup(rc.close)
	testsupport.Eventually(t, 10*time.Second, "master in metrics and status", func() bool {
		m, _ := gauge(t, d, "sosappliance_cluster_master")
		e, _ := gauge(t, d, "sosappliance_cluster_etcd_connected")
		st := d.Status()
		return m == 1 && e == 1 && st.Cluster != nil && st.Cluster.Role == "master" && st.Cluster.Publishing
	})
	etcd.Kill()
	testsupport.Eventually(t, 20*time.Second, "stepped down in metrics and status", func() bool {
		m, _ := gauge(t, d, "sosappliance_cluster_master")
		e, _ := gauge(t, d, "sosappliance_cluster_etcd_connected")
		s, _ := gauge(t, d, "sosappliance_cluster_step_downs_total")
		st := d.Status()
		return m == 0 && e == 0 && s == 1 && st.Cluster.Role == "slave" && !st.Cluster.Publishing && st.Cluster.LastError != ""
	})
}

// swapInCluster builds, opens and swaps in the cluster part spec describes
// for a controller node, as a reload does.
func swapInCluster(t *testing.T, d *Daemon, spec *desired.Cluster) *runningCluster {
	t.Helper()
	cc, err := d.buildCluster(&desired.Desired{Controller: &desired.Controller{}, Cluster: spec})
	if err != nil {
		t.Fatal(err)
	}
	rc, err := d.openCluster(cc)
	if err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	d.swapCluster(cc, rc)
	d.mu.Unlock()
	return rc
}
