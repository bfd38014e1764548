package appliance

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/appliance/desired"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestStatusSaysWhyEtcdIsUnreachable: a controller node whose
// etcd does not answer from the start (nothing listens on the endpoint)
// runs (the cluster part does not hold the daemon up), but its status
// must say why it is not master and not publishing, and its log must say
// it at least once: the operator sees `cluster: ..., etcd unreachable`
// and `openflow role: slave` and nothing else.
// Found by review (helper-74).
func TestStatusSaysWhyEtcdIsUnreachable(t *testing.T) {
	var logBuf testsupport.LockedBuffer
	d, err := NewDaemon(Options{ConfigPath: "unused.hcl", Node: "ctl-a",
		Logger: slog.New(slog.NewTextHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	port := testsupport.FreePorts(t, 1)[0]
	rc := swapInCluster(t, d, &desired.Cluster{
		Endpoints: []string{fmt.Sprintf("http://127.0.0.1:%d", port)}, Prefix: "/sos-r74/", LeaseTTL: 2 * time.Second, DialTimeout: time.Second})
	t.Cleanup(rc.close)
	said := testsupport.Poll(12*time.Second, func() bool {
		st := d.Status()
		return st.Cluster != nil && st.Cluster.LastError != "" && strings.Contains(logBuf.String(), "etcd")
	})
	st := d.Status()
	if st.Cluster == nil {
		t.Fatal("no cluster status")
	}
	if st.Cluster.Role == "master" {
		t.Errorf("master without etcd")
	}
	if !said {
		t.Errorf("12s with etcd unreachable: status role %q publishing %v last_error %q; log: %q",
			st.Cluster.Role, st.Cluster.Publishing, st.Cluster.LastError, logBuf.String())
	}
}
