package cluster

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// Role is what the election says of this node.
type Role struct {
	// Leader is true while this node holds the election: it is to be the
	// OpenFlow master.
	Leader bool
	// Generation is the create revision of the leader's election key,
	// plus Config.GenerationBase: etcd revisions only grow while etcd
	// keeps its data, and a new leader's key was created after the one it
	// replaces was, so it is larger for every new leader. It is this
	// node's own when Leader, the last leader seen otherwise (0 before
	// any).
	Generation uint64
	// LeaderNode is the node that leads, as last seen; "" when none is
	// known.
	LeaderNode string
	// Connected is false while etcd does not answer.
	Connected bool
	// Since is when Leader last changed.
	Since time.Time
	// Err is the last failure to reach etcd or campaign.
	Err string
}

// Elector runs this node's candidacy: it campaigns, holds the leadership
// while its lease lives, and steps down when the lease is lost.
type Elector struct {
	c        *Client
	onChange func(Role)

	mu   sync.Mutex
	role Role
	// delivering orders the calls of onChange: each reads the role when
	// it is made, so the last call gives the newest role, whichever
	// goroutine changed it (term and observe both do).
	delivering sync.Mutex
	// Takeovers counts the times this node became leader; StepDowns the
	// times it lost the lead other than by stopping.
	takeovers, stepDowns uint64
}

// Elector returns an elector of this node; onChange is called, from the
// elector's goroutine, with each new role.
func (c *Client) Elector(onChange func(Role)) *Elector {
	return &Elector{c: c, onChange: onChange, role: Role{Since: time.Now()}}
}

// Role is the current role.
func (e *Elector) Role() Role {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.role
}

// Counts returns how often this node took over and stepped down.
func (e *Elector) Counts() (takeovers, stepDowns uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.takeovers, e.stepDowns
}

func (e *Elector) update(f func(r *Role)) {
	e.mu.Lock()
	old := e.role
	f(&e.role)
	if e.role.Leader != old.Leader {
		e.role.Since = time.Now()
		if e.role.Leader {
			e.takeovers++
		}
	}
	changed := e.role != old
	e.mu.Unlock()
	if changed {
		e.Redeliver()
	}
}

// Redeliver calls onChange with the current role, in order with the
// elector's own calls: a role read earlier can never land after a newer
// one.
func (e *Elector) Redeliver() {
	if e.onChange == nil {
		return
	}
	e.delivering.Lock()
	defer e.delivering.Unlock()
	e.onChange(e.Role())
}

// Run campaigns until ctx ends, then resigns so that another controller
// takes over at once rather than after the lease TTL.
func (e *Elector) Run(ctx context.Context) {
	backoff := 250 * time.Millisecond
	for ctx.Err() == nil {
		err := e.term(ctx)
		if ctx.Err() != nil {
			break
		}
		if err != nil {
			e.c.log.Warn("etcd election: cannot campaign; this controller is not master until it can", "err", err, "retry_in", backoff)
			e.update(func(r *Role) { r.Leader, r.Connected, r.Err = false, false, err.Error() })
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, e.c.cfg.LeaseTTL)
		if err == nil {
			backoff = 250 * time.Millisecond
		}
	}
	e.update(func(r *Role) { r.Leader = false })
}

// term is one session: a lease, a campaign, the leadership while the lease
// lives. It returns when the lease is lost, or with the error that kept it
// from getting one.
func (e *Elector) term(ctx context.Context) error {
	cfg := e.c.cfg
	g, err := e.c.grantLease(ctx)
	if err != nil {
		return err
	}
	sess, err := concurrency.NewSession(e.c.cli, concurrency.WithLease(g.ID),
		// The TTL bounds the session's own revoke at Close.
		concurrency.WithTTL(int(g.TTL)), concurrency.WithContext(ctx))
	if err != nil {
		return err
	}
	defer func() {
		// Revoke the lease, and with it this node's key, so that a
		// candidate that stops does not stand first in line for a
		// lease TTL (sess.Close would revoke with ctx, done by now).
		sess.Orphan()
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), e.c.requestTimeout())
		_, _ = e.c.cli.Revoke(rctx, sess.Lease())
		rcancel()
	}()
	el := concurrency.NewElection(sess, cfg.electionKey())
	// The campaign's and the observer's watches need a member that has a
	// leader: one cut off from the others would keep them waiting for
	// events that never come while the lease, kept alive through another
	// member, holds.
	tctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	go func() {
		select {
		case <-sess.Done():
			cancel()
		case <-tctx.Done():
		}
	}()
	// The session ends a whole TTL after the last keepalive answer, at or
	// after the moment etcd lets the lease go and another node takes
	// over: two masters for a while. The term ends sooner, when no answer
	// came for two thirds of the TTL etcd granted.
	acks, err := e.c.cli.KeepAlive(tctx, sess.Lease())
	if err != nil {
		return err
	}
	var silent atomic.Bool
	var leadRev atomic.Int64 // this node's key's revision, once it leads
	go func() {
		if e.keepAnswered(tctx, acks, time.Duration(g.TTL)*time.Second*2/3) {
			return
		}
		silent.Store(true)
		cancel()
	}()
	e.update(func(r *Role) { r.Connected, r.Err = true, "" })
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { e.observe(tctx, el, leadRev.Load, cancel) })

	// A campaign cancelled while etcd is down resigns with the client's
	// own context, which only Close ends: do not wait for it then.
	campaign := make(chan error, 1)
	go func() { campaign <- el.Campaign(tctx, cfg.Node) }()
	select {
	case err := <-campaign:
		if err != nil && tctx.Err() == nil {
			return err
		}
	case <-tctx.Done():
	}
	if tctx.Err() != nil {
		if ctx.Err() == nil {
			e.c.log.Warn("etcd election: lease lost while campaigning")
		}
		return nil
	}
	// Campaign also returns when the keys before ours went away with
	// our own lease gone: check that our key still leads.
	lead, err := el.Leader(tctx)
	if err != nil || len(lead.Kvs) == 0 || lead.Kvs[0].CreateRevision != el.Rev() {
		cancel()
		if err == nil {
			err = errors.New("campaign returned, but this node's key does not lead")
		}
		return err
	}
	leadRev.Store(el.Rev())
	gen := cfg.GenerationBase + uint64(el.Rev())
	e.c.log.Info("etcd election: this controller leads", "node", cfg.Node, "generation", gen)
	e.update(func(r *Role) { r.Leader, r.Generation, r.LeaderNode = true, gen, cfg.Node })
	<-tctx.Done()
	if ctx.Err() != nil {
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), e.c.requestTimeout())
		_ = el.Resign(rctx)
		rcancel()
		e.update(func(r *Role) { r.Leader = false })
		return nil
	}
	why := "lease lost (etcd unreachable for the lease TTL, or this node's key gone)"
	if silent.Load() {
		why = "no keepalive answer for two thirds of the lease TTL: stepping down before etcd can let another node lead"
	}
	e.c.log.Warn("etcd election: "+why+"; stepping down to slave",
		"node", cfg.Node, "generation", gen, "lease_ttl", time.Duration(g.TTL)*time.Second)
	e.mu.Lock()
	e.stepDowns++
	e.mu.Unlock()
	e.update(func(r *Role) { r.Leader, r.Connected, r.LeaderNode = false, false, "" })
	return nil
}

// keepAnswered follows the lease's keepalive answers; false when none
// came for limit, or the lease is gone.
func (e *Elector) keepAnswered(ctx context.Context, acks <-chan *clientv3.LeaseKeepAliveResponse, limit time.Duration) bool {
	t := time.NewTimer(limit)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return true
		case resp, ok := <-acks:
			if !ok || resp == nil || resp.TTL <= 0 {
				return ctx.Err() != nil
			}
			t.Reset(limit)
		case <-t.C:
			return false
		}
	}
}

// observe follows who leads, so that a follower knows the generation it
// asks the switches for the slave role with. A leader that sees a key
// created after its own lead has lost its key (deleted by hand, say),
// and ends its term (stop).
func (e *Elector) observe(ctx context.Context, el *concurrency.Election, leadRev func() int64, stop func()) {
	for resp := range el.Observe(ctx) {
		if len(resp.Kvs) == 0 {
			continue
		}
		kv := resp.Kvs[0]
		if rev := leadRev(); rev > 0 && kv.CreateRevision > rev {
			e.c.log.Warn("etcd election: another node's key leads, this node's is gone; stepping down",
				"leader", string(kv.Value), "node", e.c.cfg.Node)
			stop()
			return
		}
		e.update(func(r *Role) {
			if !r.Leader {
				r.LeaderNode, r.Generation = string(kv.Value), e.c.cfg.GenerationBase+uint64(kv.CreateRevision)
			}
		})
	}
}
