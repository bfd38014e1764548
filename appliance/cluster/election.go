package cluster

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
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
// afterLeadCheck, when a test sets it, runs between the check that this
// node's key leads and the report that it does, with the term's cancel.
var afterLeadCheck func(cancel context.CancelFunc)

func (e *Elector) term(ctx context.Context) error {
	cfg := e.c.cfg
	granting := time.Now() // the lease lives at least its TTL from here
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
	// The session ends a whole TTL after the last keepalive answer, at or
	// after the moment etcd lets the lease go and another node takes
	// over: two masters for a while. And its keepalive, asking every
	// TTL/3 on a 500 ms tick, gives up on stalls holdLease outlives. So
	// holdLease alone ends the term: it knows when the lease surely lives
	// to, from when each answered keepalive was sent, and sees a lease
	// etcd no longer has.
	var silent atomic.Bool
	var leadRev atomic.Int64 // this node's key's revision, once it leads
	go func() {
		if e.holdLease(tctx, sess.Lease(), granting, time.Duration(g.TTL)*time.Second) {
			return
		}
		silent.Store(true)
		cancel()
	}()
	e.update(func(r *Role) { r.Connected, r.Err = true, "" })
	var wg sync.WaitGroup
	// The observers end with the term: cancel first, or a term ended by
	// an error waits on them for as long as its lease lives.
	defer func() {
		cancel()
		wg.Wait()
	}()
	wg.Go(func() { e.observe(tctx, el, leadRev.Load, cancel) })
	wg.Go(func() { e.watchOwnKey(tctx, el, leadRev.Load, cancel) })

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
	if afterLeadCheck != nil {
		afterLeadCheck(cancel)
	}
	// Leader only while the term holds: holdLease may have ended it since
	// the check above, and a leader reported past that, even for a
	// moment, would program the switches past the lease's horizon.
	var leads bool
	e.update(func(r *Role) {
		if leads = tctx.Err() == nil; leads {
			r.Leader, r.Generation, r.LeaderNode = true, gen, cfg.Node
		}
	})
	if leads {
		e.c.log.Info("etcd election: this controller leads", "node", cfg.Node, "generation", gen)
	}
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
		why = "the lease may expire before etcd answers a keepalive: stepping down before etcd can let another node lead"
	}
	e.c.log.Warn("etcd election: "+why+"; stepping down to slave",
		"node", cfg.Node, "generation", gen, "lease_ttl", time.Duration(g.TTL)*time.Second)
	e.mu.Lock()
	e.stepDowns++
	e.mu.Unlock()
	e.update(func(r *Role) { r.Leader, r.Connected, r.LeaderNode = false, false, "" })
	return nil
}

// holdLease renews the lease every sixth of its TTL and returns false
// once the lease may be about to expire: etcd renews it when it takes a
// keepalive, so it lives at least a TTL from when the last answered one
// was sent (the grant's, at first), and the term ends a margin before
// that, when etcd could let another node lead. A stall of etcd shorter
// than that costs no leadership. A renewal not answered within a sixth
// of the TTL is not given up: another is sent beside it, which the
// client sends to the next member, so that neither a slow path to etcd
// (every answer late, but in time) nor one frozen member of several costs
// the lead. It returns true when ctx ends.
func (e *Elector) holdLease(ctx context.Context, id clientv3.LeaseID, since time.Time, ttl time.Duration) bool {
	margin := max(ttl/8, 100*time.Millisecond)
	lives := since.Add(ttl - margin)
	every := ttl / 6
	const maxWaiting = 6 // renewals waiting at once
	type answer struct {
		sent     time.Time
		ok, gone bool
	}
	answers := make(chan answer, maxWaiting)
	actx, cancel := context.WithCancel(ctx)
	defer cancel() // the renewals still waiting end with the term
	waiting := 0
	send := func() {
		// Its answer counts until it can no longer move lives on.
		sent := time.Now()
		deadline := sent.Add(ttl - margin)
		waiting++
		go func() {
			kctx, kcancel := context.WithDeadline(actx, deadline)
			resp, err := e.c.cli.KeepAliveOnce(kctx, id)
			kcancel()
			answers <- answer{sent: sent, ok: err == nil && resp.TTL > 0,
				gone: errors.Is(err, rpctypes.ErrLeaseNotFound) || err == nil && resp.TTL <= 0}
		}()
	}
	nextSend := time.Now()
	for {
		now := time.Now()
		if !now.Before(lives) {
			return ctx.Err() != nil
		}
		wait := nextSend.Sub(now)
		if l := lives.Sub(now); l < wait {
			wait = l
		}
		select {
		case <-ctx.Done():
			return true
		case a := <-answers:
			waiting--
			switch {
			case ctx.Err() != nil:
				return true
			case a.gone:
				return false // gone already
			case a.ok:
				if l := a.sent.Add(ttl - margin); l.After(lives) {
					lives = l
				}
			default:
				// Failed at once (a member down): try the next soon.
				if soon := time.Now().Add(100 * time.Millisecond); soon.Before(nextSend) {
					nextSend = soon
				}
			}
		case <-time.After(max(wait, 0)):
			if time.Now().Before(nextSend) {
				continue // lives was reached first: checked above
			}
			if waiting < maxWaiting {
				send()
			}
			nextSend = time.Now().Add(every)
		}
	}
}

// watchOwnKey ends the term (stop) when this node's key is deleted while
// it leads: with no other candidate, observe sees no key lead after it.
func (e *Elector) watchOwnKey(ctx context.Context, el *concurrency.Election, leadRev func() int64, stop func()) {
	for ctx.Err() == nil && leadRev() == 0 {
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
	if ctx.Err() != nil {
		return
	}
	rev := leadRev() + 1
	for {
		for resp := range e.c.cli.Watch(ctx, el.Key(), clientv3.WithRev(rev)) {
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypeDelete {
					e.c.log.Warn("etcd election: this node's key was deleted; stepping down", "node", e.c.cfg.Node)
					stop()
					return
				}
			}
		}
		// The watch ended with the term still on: compacted past its
		// revision after a reconnect, or its member without a leader
		// for a while. Read the key again, and watch on from there.
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
		gctx, cancel := context.WithTimeout(ctx, e.c.requestTimeout())
		resp, err := e.c.cli.Get(gctx, el.Key())
		cancel()
		switch {
		case err != nil:
			continue // watch again from where it was
		case len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != leadRev():
			e.c.log.Warn("etcd election: this node's key is gone; stepping down", "node", e.c.cfg.Node)
			stop()
			return
		}
		rev = resp.Header.Revision + 1
	}
}

// observe follows who leads, so that a follower knows the generation it
// asks the switches for the slave role with. A leader that sees a key
// created after its own lead has lost its key (deleted by hand, say),
// and ends its term (stop).
func (e *Elector) observe(ctx context.Context, el *concurrency.Election, leadRev func() int64, stop func()) {
	for {
		if e.observeOnce(ctx, el, leadRev, stop) {
			return
		}
		// The observer's watch ended with the term still on (compacted
		// past, no leader for a while): observe again.
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// observeOnce is one observer's run; it says whether it ended the term.
func (e *Elector) observeOnce(ctx context.Context, el *concurrency.Election, leadRev func() int64, stop func()) bool {
	for resp := range el.Observe(ctx) {
		if len(resp.Kvs) == 0 {
			continue
		}
		kv := resp.Kvs[0]
		if rev := leadRev(); rev > 0 && kv.CreateRevision > rev {
			e.c.log.Warn("etcd election: another node's key leads, this node's is gone; stepping down",
				"leader", string(kv.Value), "node", e.c.cfg.Node)
			stop()
			return true
		}
		e.update(func(r *Role) {
			if !r.Leader {
				r.LeaderNode, r.Generation = string(kv.Value), e.c.cfg.GenerationBase+uint64(kv.CreateRevision)
			}
		})
	}
	return false
}
