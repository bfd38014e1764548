package appliance

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sosappliance/sosappliance/appliance/cluster"
	"github.com/sosappliance/sosappliance/appliance/desired"
	"github.com/sosappliance/sosappliance/sdn/ofp13"
)

// ClusterStatus is this node's part in the cluster: etcd, and on a
// controller the election.
type ClusterStatus struct {
	Etcd []string `json:"etcd"`
	// Publishing is true while this node's status entry reaches etcd.
	Publishing bool   `json:"publishing"`
	LastError  string `json:"last_error,omitempty"`
	// Duplicate names another process that publishes under this node's
	// name (node names must be unique), as its entry says.
	Duplicate string `json:"duplicate,omitempty"`
	// Role is the controller's OpenFlow role ("master", "slave"); empty
	// on a node that runs no controller.
	Role       string    `json:"role,omitempty"`
	Generation uint64    `json:"generation,omitempty"`
	Leader     string    `json:"leader,omitempty"`
	RoleSince  time.Time `json:"role_since,omitzero"`
	Takeovers  uint64    `json:"takeovers"`
	StepDowns  uint64    `json:"step_downs"`
}

// clusterCandidate is the cluster part of a config, built: TLS files read.
type clusterCandidate struct {
	spec  *desired.Cluster
	cfg   cluster.Config
	elect bool // this node runs a controller, so it campaigns
}

// runningCluster is the etcd client with the publisher, and the elector on
// a controller node.
type runningCluster struct {
	cand *clusterCandidate
	cli  *cluster.Client
	el   *cluster.Elector
	pub  *cluster.Publisher
	stop context.CancelFunc
	wg   sync.WaitGroup
}

func (d *Daemon) buildCluster(want *desired.Desired) (*clusterCandidate, error) {
	spec := want.Cluster
	if spec == nil {
		return nil, nil
	}
	var tc *cluster.TLS
	if f := spec.TLS; f != nil {
		var err error
		if tc, err = cluster.LoadTLS(cluster.TLSFiles{CA: f.CAFile, Cert: f.CertFile, Key: f.KeyFile}); err != nil {
			return nil, err
		}
	}
	return &clusterCandidate{spec: spec, elect: want.Controller != nil, cfg: cluster.Config{
		Endpoints: spec.Endpoints, Prefix: spec.Prefix, LeaseTTL: spec.LeaseTTL, DialTimeout: spec.DialTimeout,
		TLS: tc, Node: d.opts.Node, GenerationBase: spec.GenerationBase,
	}}, nil
}

// sameCluster says whether the running cluster part serves the new config
// as it is.
func sameCluster(a, b *clusterCandidate) bool {
	if a == nil || b == nil {
		return a == b
	}
	sameTLS := (a.spec.TLS == nil) == (b.spec.TLS == nil)
	if sameTLS && a.spec.TLS != nil {
		// A certificate replaced under the same paths is taken in place
		// (retakeClusterTLS); a replaced CA needs a new client.
		sameTLS = *a.spec.TLS == *b.spec.TLS && a.cfg.TLS.SameCA(b.cfg.TLS)
	}
	return slices.Equal(a.spec.Endpoints, b.spec.Endpoints) && a.spec.Prefix == b.spec.Prefix &&
		a.spec.LeaseTTL == b.spec.LeaseTTL && a.spec.DialTimeout == b.spec.DialTimeout && sameTLS && a.elect == b.elect &&
		a.spec.GenerationBase == b.spec.GenerationBase
}

// retakeClusterTLS gives the running etcd client the certificate and key
// as read for this reload (same paths and CA, see sameCluster): replaced
// in place, they take effect for the connections it makes from now on.
// d.mu is held.
func (d *Daemon) retakeClusterTLS(cc *clusterCandidate) {
	rc := d.cl
	if rc == nil || cc == nil || rc.cand.cfg.TLS == nil || cc.cfg.TLS == nil || !rc.cand.cfg.TLS.SameCA(cc.cfg.TLS) {
		return
	}
	if rc.cand.cfg.TLS.Take(cc.cfg.TLS) {
		d.log.Info("etcd TLS files changed; connections to etcd made from now on use them",
			"cert", cc.cfg.TLS.Files().Cert)
	}
}

// openCluster makes the etcd client of cc; it connects in the background.
func (d *Daemon) openCluster(cc *clusterCandidate) (*runningCluster, error) {
	cli, err := cluster.Open(cc.cfg, d.log.With("part", "cluster"))
	if err != nil {
		return nil, err
	}
	rc := &runningCluster{cand: cc, cli: cli}
	rc.pub = cli.Publisher(d.publishedStatus)
	if cc.elect {
		rc.el = cli.Elector(func(r cluster.Role) { d.onRole(rc, r) })
	}
	return rc, nil
}

// start runs the publisher and the elector.
func (rc *runningCluster) start() {
	ctx, cancel := context.WithCancel(context.Background())
	rc.stop = cancel
	rc.wg.Go(func() { rc.pub.Run(ctx) })
	if rc.el != nil {
		rc.wg.Go(func() { rc.el.Run(ctx) })
	}
}

// close resigns, withdraws the status entry and closes the client. It must
// not be called with d.mu held while the daemon's publisher might wait for
// it; publishedStatus never takes d.mu.
func (rc *runningCluster) close() {
	if rc.stop != nil {
		rc.stop()
	}
	// Closing the client ends a resign or a revoke that waits for an
	// etcd that is gone; the elector bounds each to a second.
	done := make(chan struct{})
	go func() { rc.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
	}
	rc.cli.Close()
	<-done
}

// onRole gives the controller the role the election decided. Leader:
// master with the election's generation; otherwise slave with the
// generation of the last leader seen.
func (d *Daemon) onRole(rc *runningCluster, r cluster.Role) {
	if d.clNow.Load() != rc {
		return // a cluster part being replaced
	}
	ctl := d.ctlNow.Load()
	if ctl == nil {
		return
	}
	role := ofp13.RoleSlave
	if r.Leader {
		role = ofp13.RoleMaster
	}
	if err := ctl.SetRole(role, r.Generation); err != nil {
		d.log.Error("setting the controller role", "err", err)
	}
}

// swapCluster puts cc in place of the running cluster part, unless that
// already serves it, and gives the controller its role. d.mu is held.
func (d *Daemon) swapCluster(cc *clusterCandidate, next *runningCluster) {
	old := d.cl
	if next != nil {
		d.cl = next
		d.clNow.Store(next)
		next.start()
	} else if cc == nil {
		d.cl = nil
		d.clNow.Store(nil)
	}
	if old != nil && old != d.cl {
		go old.close() // its final role update is ignored: it is not clNow
	}
	if rc := d.cl; rc != nil && rc.el != nil {
		rc.el.Redeliver()
	}
}

// publishedBase is the part of the node's status that only changes under
// d.mu, copied for the publisher, which must never wait for d.mu.
type publishedBase struct {
	roles     []string
	hash      string
	pskIDs    []string
	serial    uint64
	lastApply string
	appliedAt time.Time
}

// snapshotLocked refreshes what the publisher reads. d.mu is held.
func (d *Daemon) snapshotLocked() {
	b := &publishedBase{roles: slices.Clone(d.status.Roles), hash: d.status.ConfigHash, pskIDs: slices.Clone(d.status.PSKIDs), serial: d.status.Serial}
	if a := d.status.LastApply; a != nil {
		b.lastApply, b.appliedAt = a.Result, a.At
	}
	d.pubBase.Store(b)
}

// publishedStatus is what this node publishes: the snapshot, the role and
// the health of its controller.
func (d *Daemon) publishedStatus() cluster.NodeStatus {
	st := cluster.NodeStatus{Health: "ok"}
	var problems []string
	if b := d.pubBase.Load(); b != nil {
		st.Roles, st.ConfigHash, st.PSKIDs, st.Serial, st.LastApply, st.AppliedAt = b.roles, b.hash, b.pskIDs, b.serial, b.lastApply, b.appliedAt
		if b.lastApply != "" && b.lastApply != "ok" {
			problems = append(problems, "last apply failed")
		}
	}
	if ctl := d.ctlNow.Load(); ctl != nil {
		cs := ctl.Status()
		if cs.Role.Enabled {
			st.Role, st.Generation = cs.Role.Role, cs.Role.Generation
		}
		for _, sw := range cs.Switches {
			if !sw.Connected {
				problems = append(problems, "switch "+sw.Name+" not connected")
			}
		}
	}
	if len(problems) > 0 {
		st.Health = strings.Join(problems, ", ")
	}
	return st
}

// clusterStatus is the cluster part of Status; nil without a cluster.
func (d *Daemon) clusterStatus() *ClusterStatus {
	rc := d.clNow.Load()
	if rc == nil {
		return nil
	}
	cs := &ClusterStatus{Etcd: rc.cand.spec.Endpoints}
	cs.Publishing, cs.LastError = rc.pub.Connected()
	cs.Duplicate = rc.pub.Duplicate()
	if rc.el != nil {
		r := rc.el.Role()
		cs.Role, cs.Generation, cs.Leader, cs.RoleSince = "slave", r.Generation, r.LeaderNode, r.Since
		if r.Leader {
			cs.Role = "master"
		}
		if r.Err != "" && cs.LastError == "" {
			cs.LastError = r.Err
		}
		cs.Takeovers, cs.StepDowns = rc.el.Counts()
	}
	return cs
}

var (
	descClusterMaster    = prometheus.NewDesc("sosappliance_cluster_master", "1 while this controller is the elected OpenFlow master.", nil, nil)
	descClusterEtcd      = prometheus.NewDesc("sosappliance_cluster_etcd_connected", "1 while this node's status reaches etcd.", nil, nil)
	descClusterTakeovers = prometheus.NewDesc("sosappliance_cluster_takeovers_total", "Times this controller became master.", nil, nil)
	descClusterStepDowns = prometheus.NewDesc("sosappliance_cluster_step_downs_total", "Times this controller lost the master role with its etcd lease.", nil, nil)
	descClusterGen       = prometheus.NewDesc("sosappliance_cluster_generation", "The OpenFlow generation_id of the current master as this node knows it.", nil, nil)
)

type clusterCollector struct{ d *Daemon }

func (c *clusterCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descClusterMaster, descClusterEtcd, descClusterTakeovers, descClusterStepDowns, descClusterGen} {
		ch <- d
	}
}

func (c *clusterCollector) Collect(ch chan<- prometheus.Metric) {
	cs := c.d.clusterStatus()
	if cs == nil {
		return
	}
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	ch <- prometheus.MustNewConstMetric(descClusterEtcd, prometheus.GaugeValue, b(cs.Publishing))
	if cs.Role != "" {
		ch <- prometheus.MustNewConstMetric(descClusterMaster, prometheus.GaugeValue, b(cs.Role == "master"))
		ch <- prometheus.MustNewConstMetric(descClusterTakeovers, prometheus.CounterValue, float64(cs.Takeovers))
		ch <- prometheus.MustNewConstMetric(descClusterStepDowns, prometheus.CounterValue, float64(cs.StepDowns))
		ch <- prometheus.MustNewConstMetric(descClusterGen, prometheus.GaugeValue, float64(cs.Generation))
	}
}
