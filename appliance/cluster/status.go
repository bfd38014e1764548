package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// NodeStatus is what one node publishes of itself.
type NodeStatus struct {
	Node  string   `json:"node"`
	Roles []string `json:"roles"`
	// Role is "master" or "slave" on a controller, "" elsewhere.
	Role       string `json:"role,omitempty"`
	Generation uint64 `json:"generation,omitempty"`
	// ConfigHash is the sha256 of the file the node runs: every node must
	// run the same file.
	ConfigHash string `json:"config_hash"`
	// PSKIDs are the ids of the PSKs the node's agents hold (none on a
	// node without agents): agents of different PSKs cannot set up
	// sessions between them.
	PSKIDs    []string  `json:"psk_ids,omitempty"`
	Serial    uint64    `json:"serial"`
	LastApply string    `json:"last_apply"`
	AppliedAt time.Time `json:"applied_at,omitzero"`
	// Health is "ok" or what is wrong.
	Health string `json:"health"`
	// Published is when the node last wrote this entry: on each change,
	// and at least every lease TTL.
	Published time.Time `json:"published"`
	// Instance names the process that wrote the entry (host, pid and a
	// random id), so that two processes publishing under one node name
	// can say which the other is.
	Instance string `json:"instance,omitempty"`
}

// maxStatusSize bounds one entry a node publishes and reads back; etcd
// itself bounds requests at 1.5 MiB.
const maxStatusSize = 64 << 10

// Publisher keeps this node's status in etcd under a lease of its own: a
// node that stops, or loses etcd for the lease TTL, disappears from the
// table, which is how `status --cluster` tells it is gone.
type Publisher struct {
	c   *Client
	get func() NodeStatus
	// every is how often get is asked.
	every time.Duration

	// instance is this process's Instance.
	instance string

	mu        sync.Mutex
	connected bool
	lastErr   string
	puts      uint64
	// other is the Instance of another process that wrote this node's
	// entry over this one's, under otherLease; otherAt is when this one
	// last found it so, or found that lease alive.
	other      string
	otherLease clientv3.LeaseID
	otherAt    time.Time
}

// Publisher returns a publisher of what get returns.
func (c *Client) Publisher(get func() NodeStatus) *Publisher {
	host, _ := os.Hostname()
	var id [4]byte
	_, _ = rand.Read(id[:])
	return &Publisher{c: c, get: get, every: time.Second,
		instance: fmt.Sprintf("host %s pid %d id %x", host, os.Getpid(), id)}
}

// Duplicate names another process that publishes under this node's name,
// as its entry says, or "" when none has been seen for three lease TTLs
// (its lease found alive counts as seen: its TTL may be longer than this
// one's).
func (p *Publisher) Duplicate() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.duplicateLocked(time.Now())
}

func (p *Publisher) duplicateLocked(now time.Time) string {
	if p.other == "" || now.Sub(p.otherAt) > 3*p.c.cfg.LeaseTTL {
		return ""
	}
	return p.other
}

// otherStillThere keeps the flag up while the other process's lease
// lives (it rewrites its entry only every TTL of its own, which may be
// longer than this one's), and takes it down as soon as the lease is gone.
func (p *Publisher) otherStillThere(ctx context.Context) {
	p.mu.Lock()
	lease := p.otherLease
	flagged := p.duplicateLocked(time.Now()) != ""
	p.mu.Unlock()
	if !flagged || lease == 0 {
		return
	}
	tctx, cancel := context.WithTimeout(ctx, p.c.requestTimeout())
	resp, err := p.c.cli.TimeToLive(tctx, lease)
	cancel()
	if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return // unknown: the flag lapses on its own
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.otherLease != lease {
		return
	}
	if err == nil && resp.TTL > 0 {
		p.otherAt = time.Now()
	} else {
		p.other, p.otherLease = "", 0
	}
}

// printable is s cut to n bytes with every byte outside printable ASCII
// made '?'.
func printable(s string, n int) string {
	b := []byte(s[:min(len(s), n)])
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			b[i] = '?'
		}
	}
	return string(b)
}

// overwritten records that the entry this publisher wrote in this term
// was found holding another lease: another live process writes under
// this node's name (a process of this node that went away left its lease
// behind once, at most, and wrote nothing after this one's first write).
func (p *Publisher) overwritten(kv *mvccpb.KeyValue) {
	var theirs NodeStatus
	if len(kv.Value) <= maxStatusSize {
		_ = json.Unmarshal(kv.Value, &theirs)
	}
	if theirs.Instance == p.instance {
		return // a write of this process's own earlier term
	}
	// Anyone who can write etcd wrote it: it goes to this node's status
	// and entry only as printable ASCII, and short.
	other := printable(theirs.Instance, 100)
	if other == "" {
		other = fmt.Sprintf("a process holding lease %x", kv.Lease)
	}
	p.mu.Lock()
	first := p.duplicateLocked(time.Now()) == ""
	p.other, p.otherLease, p.otherAt = other, clientv3.LeaseID(kv.Lease), time.Now()
	p.mu.Unlock()
	if first {
		p.c.log.Error("etcd status: another process publishes as this node; node names must be unique",
			"node", p.c.cfg.Node, "other", other, "this", p.instance)
	}
}

// Connected reports whether the last write reached etcd, and the last
// error if not.
func (p *Publisher) Connected() (bool, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.connected, p.lastErr
}

func (p *Publisher) setState(ok bool, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.connected = ok
	if err != nil {
		p.lastErr = err.Error()
	} else {
		p.lastErr = ""
	}
}

// Run publishes until ctx ends, then deletes the entry by revoking its
// lease.
func (p *Publisher) Run(ctx context.Context) {
	backoff := 250 * time.Millisecond
	for ctx.Err() == nil {
		began := time.Now()
		err := p.term(ctx)
		if ctx.Err() != nil {
			return
		}
		if time.Since(began) > p.c.cfg.LeaseTTL {
			// A term that held: the next failure starts the backoff
			// afresh, not where a flap long ago left it.
			backoff = 250 * time.Millisecond
		}
		if err != nil {
			p.setState(false, err)
			p.c.log.Warn("etcd status: cannot publish; retrying", "err", err, "retry_in", backoff)
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, p.c.cfg.LeaseTTL)
	}
}

func (p *Publisher) term(ctx context.Context) error {
	g, err := p.c.grantLease(ctx)
	if err != nil {
		return err
	}
	sess, err := concurrency.NewSession(p.c.cli, concurrency.WithLease(g.ID),
		// The TTL bounds the session's own revoke at Close.
		concurrency.WithTTL(int(g.TTL)), concurrency.WithContext(ctx))
	if err != nil {
		return err
	}
	defer sess.Close()
	key := p.c.cfg.statusKey(p.c.cfg.Node)
	var last []byte
	var lastPut time.Time
	// wrote is whether this term wrote the entry: its first write takes
	// over whatever lease the entry held (a restarted node's last
	// process may have left its own), but a later write that finds
	// another lease there has found another writer.
	wrote := false
	t := time.NewTicker(p.every)
	defer t.Stop()
	for {
		st := p.get()
		st.Node, st.Instance = p.c.cfg.Node, p.instance
		if time.Since(lastPut) > p.c.cfg.LeaseTTL {
			p.otherStillThere(ctx)
		}
		if other := p.Duplicate(); other != "" {
			dup := fmt.Sprintf("another process publishes as node %s (%s)", p.c.cfg.Node, other)
			if st.Health == "ok" || st.Health == "" {
				st.Health = dup
			} else {
				st.Health += ", " + dup
			}
		}
		body, err := json.Marshal(st)
		if err != nil {
			return err
		}
		// A change is written at once; an unchanged entry again every
		// lease TTL, so that one a replaced publisher of this node
		// took away with its lease comes back.
		if !bytes.Equal(body, last) || time.Since(lastPut) > p.c.cfg.LeaseTTL {
			// Published changes with every write; compare without it.
			st.Published = time.Now().UTC()
			out, _ := json.Marshal(st)
			if len(out) > maxStatusSize {
				return fmt.Errorf("status of %d bytes exceeds %d", len(out), maxStatusSize)
			}
			pctx, cancel := context.WithTimeout(ctx, p.c.requestTimeout())
			put := clientv3.OpPut(key, string(out), clientv3.WithLease(sess.Lease()))
			var resp *clientv3.TxnResponse
			resp, err = p.c.cli.Txn(pctx).
				If(clientv3.Compare(clientv3.LeaseValue(key), "=", sess.Lease())).
				Then(put).
				Else(clientv3.OpGet(key), put).
				Commit()
			cancel()
			if err == nil && !resp.Succeeded && wrote {
				if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 && kvs[0].Lease != int64(sess.Lease()) {
					p.overwritten(kvs[0])
				}
			}
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				p.setState(false, err)
				// The lease may still live: try again on the next tick.
			} else {
				last, lastPut, wrote = body, time.Now(), true
				p.setState(true, nil)
				p.mu.Lock()
				p.puts++
				p.mu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
			// The session would revoke with the ended ctx, which fails:
			// revoke here, so a stopped node is gone at once rather
			// than after its TTL.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.c.requestTimeout())
			_, _ = p.c.cli.Revoke(rctx, sess.Lease())
			cancel()
			return nil
		case <-sess.Done():
			return fmt.Errorf("status lease lost (etcd unreachable for the lease TTL)")
		case <-t.C:
		}
	}
}

// Statuses reads every node's published status, sorted by node. An entry
// that does not decode is returned with its Health saying so.
func (c *Client) Statuses(ctx context.Context) ([]NodeStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, c.requestTimeout())
	defer cancel()
	resp, err := c.cli.Get(ctx, c.cfg.statusPrefix(), clientv3.WithPrefix(), clientv3.WithLimit(4096))
	if err != nil {
		return nil, c.why(fmt.Errorf("read statuses from etcd (%s): %w", strings.Join(c.cfg.Endpoints, ", "), err))
	}
	var out []NodeStatus
	for _, kv := range resp.Kvs {
		name := strings.TrimPrefix(string(kv.Key), c.cfg.statusPrefix())
		var st NodeStatus
		if len(kv.Value) > maxStatusSize {
			st = NodeStatus{Node: name, Health: fmt.Sprintf("status entry of %d bytes, over %d", len(kv.Value), maxStatusSize)}
		} else if err := json.Unmarshal(kv.Value, &st); err != nil {
			st = NodeStatus{Node: name, Health: "status entry does not decode: " + err.Error()}
		}
		if st.Node != name {
			st.Health = fmt.Sprintf("entry under %q names node %q", name, st.Node)
			st.Node = name
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b NodeStatus) int { return strings.Compare(a.Node, b.Node) })
	return out, nil
}
