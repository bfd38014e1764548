package relay

import (
	"net/netip"
	"sync"
	"time"

	"github.com/sosappliance/sosappliance/dataplane/agentspec"
	"github.com/sosappliance/sosappliance/sdn/spread"
)

// farDownFor is how long a far agent that did not answer a session's
// streams, or refused them for another reason than its limits
// (atItsLimits), is left out of the spread: its buckets go to the live
// agents of its site, as the controller deals them once its health checks
// see it down too. After that the agent is tried again.
const farDownFor = 10 * time.Second

// farHealth remembers the far agents whose streams failed recently.
type farHealth struct {
	mu    sync.Mutex
	until map[string]time.Time
}

func (f *farHealth) markDown(name string, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.until == nil {
		f.until = map[string]time.Time{}
	}
	f.until[name] = now.Add(farDownFor)
}

func (f *farHealth) up(peers []Peer, now time.Time) []bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]bool, len(peers))
	for i, p := range peers {
		out[i] = !now.Before(f.until[p.Name])
	}
	return out
}

// Peer is a far agent of a spread route.
type Peer = agentspec.Peer

// farAgent is the server-side agent of a connection from client on a
// spread route: the one package spread deals the connection's bucket to,
// among the far agents not known to be down, the same agent the server
// site's switch steers the server's replies to. A route without Peers
// has one far agent, Peer.
func farAgent(w Whitelist, client netip.AddrPort, up []bool) (name string, addr netip.AddrPort) {
	if len(w.Peers) == 0 {
		return w.PeerName, w.Peer
	}
	live := false
	for _, u := range up {
		live = live || u
	}
	if !live {
		// Every far agent failed lately: try the home agent of the
		// bucket rather than none.
		up = nil
	}
	b, err := spread.Assign(spread.Mode(w.Spread), w.SpreadBits, len(w.Peers), up)
	if err != nil {
		return w.PeerName, w.Peer
	}
	p := w.Peers[b.Agent(client)]
	return p.Name, p.Addr
}
