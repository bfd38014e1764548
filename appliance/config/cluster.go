package config

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
)

// Cluster is the cluster {} block: the etcd cluster the controllers elect
// their leader on and every node publishes its status to.
type Cluster struct {
	// Endpoints are etcd client URLs, "http://IP:PORT" or "https://IP:PORT".
	Endpoints []string
	// Prefix is where the appliance keeps its keys in etcd; it ends in "/".
	Prefix string
	// LeaseTTL is the lease of the election and of each status entry:
	// how long a leader cut off from etcd stays master, and how long a
	// dead node's status stays visible.
	LeaseTTL time.Duration
	// GenerationBase is added to every OpenFlow role generation_id (etcd
	// revisions): after etcd is rebuilt or restored from an older
	// snapshot its revisions start lower than the generation switches
	// last saw, and a base above that makes the next master's larger.
	GenerationBase uint64
	// DialTimeout bounds connecting to etcd.
	DialTimeout time.Duration
	// TLS is nil unless the block has a tls {} block (client certificates
	// for etcd).
	TLS   *ClusterTLS
	Range hcl.Range
}

// ClusterTLS are the files of TLS to etcd: the CA that signed etcd's
// certificate, and this node's client certificate and key.
type ClusterTLS struct {
	CAFile   string
	CertFile string
	KeyFile  string
	Range    hcl.Range
}

// Defaults of the cluster block.
const (
	DefaultClusterPrefix      = "/sosappliance/"
	DefaultClusterLeaseTTL    = 5 * time.Second
	DefaultClusterDialTimeout = 3 * time.Second
)

// ControllerFor returns the controller block of node, or nil.
func (c *Config) ControllerFor(node string) *Controller {
	for _, ctl := range c.Controllers {
		if ctl.Node == node {
			return ctl
		}
	}
	return nil
}

var clusterSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "etcd", Required: true}, {Name: "prefix"}, {Name: "lease_ttl"}, {Name: "dial_timeout"}, {Name: "generation_base"},
	},
	Blocks: []hcl.BlockHeaderSchema{{Type: "tls"}},
}

func decodeCluster(b *hcl.Block, diags *hcl.Diagnostics) *Cluster {
	a, blocks := newAttrs(b.Body, clusterSchema, diags)
	c := &Cluster{
		Endpoints:   a.strList("etcd"),
		Prefix:      a.str("prefix", DefaultClusterPrefix),
		LeaseTTL:    a.duration("lease_ttl", DefaultClusterLeaseTTL),
		DialTimeout: a.duration("dial_timeout", DefaultClusterDialTimeout),
		// Below 2^62: etcd revisions add to it without wrapping the
		// switches' serial-number comparison of generations.
		GenerationBase: uint64(a.integer("generation_base", 0, 0, 1<<62)),
		Range:          b.DefRange,
	}
	if a.has("etcd") && len(c.Endpoints) == 0 {
		a.errorf("etcd", "cluster etcd is empty", `List the etcd client URLs, e.g. ["http://192.0.2.10:2379", "http://192.0.2.11:2379", "http://192.0.2.12:2379"].`)
	}
	seen := map[string]bool{}
	for _, ep := range c.Endpoints {
		if err := validEtcdEndpoint(ep); err != nil {
			a.errorf("etcd", "cluster etcd endpoint %q: %v", `Write each endpoint as "http://IP:PORT" or "https://IP:PORT".`, ep, err)
		}
		if seen[ep] {
			a.errorf("etcd", "cluster etcd lists %q twice", "Each etcd member once.", ep)
		}
		seen[ep] = true
	}
	if !strings.HasPrefix(c.Prefix, "/") || !strings.HasSuffix(c.Prefix, "/") || len(c.Prefix) < 2 {
		a.errorf("prefix", "cluster prefix %q must start and end with /", `E.g. "/sosappliance/"; every deployment sharing an etcd needs its own.`, c.Prefix)
	}
	// etcd leases are whole seconds, and a TTL below 2 s expires on an
	// ordinary hiccup.
	if c.LeaseTTL < 2*time.Second || c.LeaseTTL > time.Hour || c.LeaseTTL%time.Second != 0 {
		a.errorf("lease_ttl", "cluster lease_ttl %s must be whole seconds between 2s and 1h", `E.g. "5s": a cut-off master steps down after it, and a takeover waits for it.`, c.LeaseTTL)
	}
	for _, blk := range blocks {
		if c.TLS != nil {
			*diags = append(*diags, diagAt(blk.DefRange, "Duplicate tls block",
				fmt.Sprintf("Only one tls block is allowed in cluster; the first is at %s.", c.TLS.Range)))
			continue
		}
		c.TLS = decodeClusterTLS(blk, diags)
	}
	for _, ep := range c.Endpoints {
		if c.TLS != nil && strings.HasPrefix(ep, "http://") {
			a.errorf("etcd", "cluster etcd endpoint %q is plain http, but the cluster has a tls block", `Use "https://" with tls, or drop the tls block.`, ep)
		}
		if c.TLS == nil && strings.HasPrefix(ep, "https://") {
			a.errorf("etcd", "cluster etcd endpoint %q is https, but the cluster has no tls block", `Add tls { ca_file = "...", cert_file = "...", key_file = "..." }.`, ep)
		}
	}
	return c
}

func validEtcdEndpoint(ep string) error {
	u, err := url.Parse(ep)
	if err != nil {
		return fmt.Errorf("not a URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("scheme %q is not http or https", u.Scheme)
	}
	if u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.User != nil {
		return fmt.Errorf("has a path, query or user")
	}
	if err := ValidHostPort(u.Host); err != nil {
		return err
	}
	if strings.HasSuffix(u.Host, ":0") {
		return fmt.Errorf("port 0")
	}
	return nil
}

var clusterTLSSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{
	{Name: "ca_file", Required: true}, {Name: "cert_file", Required: true}, {Name: "key_file", Required: true},
}}

func decodeClusterTLS(b *hcl.Block, diags *hcl.Diagnostics) *ClusterTLS {
	a, _ := newAttrs(b.Body, clusterTLSSchema, diags)
	t := &ClusterTLS{CAFile: a.str("ca_file", ""), CertFile: a.str("cert_file", ""), KeyFile: a.str("key_file", ""), Range: b.DefRange}
	for _, name := range []string{"ca_file", "cert_file", "key_file"} {
		if v := a.str(name, "/"); !strings.HasPrefix(v, "/") {
			a.errorf(name, "cluster tls %s must be an absolute path", "Write the full path of the PEM file.", name)
		}
	}
	return t
}

// validateCluster checks the controllers against the cluster block: each
// node runs one controller at most, and several controllers need etcd to
// elect which of them programs the switches.
func validateCluster(cfg *Config, add func(rng hcl.Range, hint, format string, args ...any)) {
	seen := map[string]*Controller{}
	for _, c := range cfg.Controllers {
		if prev, dup := seen[c.Node]; dup {
			add(c.Range, fmt.Sprintf("A node runs one controller; the first block for %q is at %s.", c.Node, prev.Range),
				"Duplicate controller node %q", c.Node)
			continue
		}
		seen[c.Node] = c
	}
	if len(cfg.Controllers) > 1 && cfg.Cluster == nil {
		add(cfg.Controllers[1].Range, `Add cluster { etcd = ["http://IP:2379", ...] }: the controllers elect the one that programs the switches on etcd.`,
			"Several controller blocks need a cluster block")
	}
}
