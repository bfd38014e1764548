package desired

import (
	"time"

	"github.com/sosappliance/sosappliance/appliance/config"
)

// Cluster is what a node needs of the cluster block: where etcd is, and
// who is expected in it. Every node of a deployment with a cluster block
// gets it, agents too, since every node publishes its status.
type Cluster struct {
	Endpoints   []string
	Prefix      string
	LeaseTTL    time.Duration
	DialTimeout time.Duration
	// GenerationBase is added to every role generation (config.Cluster).
	GenerationBase uint64
	// TLS names the files of TLS to etcd; nil for plain http.
	TLS *TLSFiles
	// Controllers are the controller nodes, in the file's order; Nodes
	// every node with a role, sorted: status --cluster flags any of them
	// that publishes nothing.
	Controllers []string
	Nodes       []string
}

func compileCluster(cfg *config.Config) *Cluster {
	c := cfg.Cluster
	if c == nil {
		return nil
	}
	out := &Cluster{Endpoints: append([]string(nil), c.Endpoints...), Prefix: c.Prefix, LeaseTTL: c.LeaseTTL,
		DialTimeout: c.DialTimeout, GenerationBase: c.GenerationBase, Nodes: Nodes(cfg)}
	if c.TLS != nil {
		out.TLS = &TLSFiles{CertFile: c.TLS.CertFile, KeyFile: c.TLS.KeyFile, CAFile: c.TLS.CAFile}
	}
	for _, ctl := range cfg.Controllers {
		out.Controllers = append(out.Controllers, ctl.Node)
	}
	return out
}
