package labnet

import (
	"slices"
	"testing"
)

// TestHAConfig: the second controller copies the first one's settings on
// the next port, and the cluster block names the lab's three etcd members.
func TestHAConfig(t *testing.T) {
	cf, err := openConfig("../sos.hcl")
	if err != nil {
		t.Fatal(err)
	}
	cf.setPaths("/run/sosappliance-lab/abcd")
	first, err := cf.check("lab.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if err := cf.addHA(first.Controller.Listen); err != nil {
		t.Fatal(err)
	}
	cfg, err := cf.check("lab.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Controllers) != 2 || cfg.Cluster == nil {
		t.Fatalf("controllers %v, cluster %v", cfg.Controllers, cfg.Cluster)
	}
	a, b := cfg.Controllers[0], cfg.Controllers[1]
	if b.Node != SecondController || b.Listen != "127.0.0.1:6654" || b.Keepalive != a.Keepalive || b.HealthInterval != a.HealthInterval {
		t.Errorf("second controller %+v, first %+v", b, a)
	}
	if !slices.Equal(cfg.Cluster.Endpoints, EtcdEndpoints()) || len(cfg.Cluster.Endpoints) != 3 || cfg.Cluster.LeaseTTL.Seconds() != 3 {
		t.Errorf("cluster %+v", cfg.Cluster)
	}
	if _, err := labSites(cfg); err != nil {
		t.Error(err)
	}
}
