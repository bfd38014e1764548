package config

import (
	"strings"
	"testing"
	"time"
)

const twoControllers = `
controller {
  node   = "ctl-a"
  listen = "127.0.0.1:6653"
}
controller {
  node   = "ctl-b"
  listen = "127.0.0.1:6654"
}
cluster {
  etcd            = ["http://127.0.0.1:2379", "http://127.0.0.1:22379"]
  lease_ttl       = "3s"
  generation_base = 5000000
}
security {
  psk_file = "/etc/sosappliance/psk"
}
site "a" {
  prefixes = ["10.1.0.0/24"]
}
`

func TestClusterBlock(t *testing.T) {
	cfg := mustParse(t, twoControllers)
	if len(cfg.Controllers) != 2 || cfg.Controller != cfg.Controllers[0] {
		t.Fatalf("controllers %v, first %v", cfg.Controllers, cfg.Controller)
	}
	if c := cfg.ControllerFor("ctl-b"); c == nil || c.Listen != "127.0.0.1:6654" {
		t.Errorf("ControllerFor(ctl-b) = %+v", c)
	}
	if cfg.ControllerFor("agent") != nil {
		t.Errorf("ControllerFor(agent) is not nil")
	}
	cl := cfg.Cluster
	if cl == nil || len(cl.Endpoints) != 2 || cl.LeaseTTL != 3*time.Second || cl.Prefix != DefaultClusterPrefix ||
		cl.DialTimeout != DefaultClusterDialTimeout || cl.TLS != nil || cl.GenerationBase != 5000000 {
		t.Errorf("cluster %+v", cl)
	}
}

func TestNoClusterBlock(t *testing.T) {
	src := strings.Replace(twoControllers, `controller {
  node   = "ctl-b"
  listen = "127.0.0.1:6654"
}`, "", 1)
	src = src[:strings.Index(src, "cluster {")] + src[strings.Index(src, "security {"):]
	cfg := mustParse(t, src)
	if cfg.Cluster != nil || len(cfg.Controllers) != 1 {
		t.Errorf("cluster %v, controllers %v", cfg.Cluster, cfg.Controllers)
	}
}

func TestClusterHTTPSNeedsTLS(t *testing.T) {
	src := strings.Replace(twoControllers, `"http://127.0.0.1:22379"`, `"https://127.0.0.1:22379"`, 1)
	_, diags := parseString(t, src)
	if !diags.HasErrors() || !strings.Contains(diags.Error(), `is https, but the cluster has no tls block`) {
		t.Errorf("diagnostics %v", diags)
	}
}
