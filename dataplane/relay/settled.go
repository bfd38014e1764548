package relay

import (
	"time"

	"github.com/sosappliance/sosappliance/dataplane/stripe"
)

// A client side whose pooled session it never heard from founds it again
// with a fresh hello for stream 0, resending every byte from the first,
// or, refused, carries the connection direct with them (refound,
// pool.go). Both are safe only if no other founding of that session ever
// delivered any of those bytes to the server. One could: stream 0's BIND,
// queued in the server side's socket when the client side gave up on it,
// founds the session late, delivers, and its answers die with the stream
// the client side reset. So the server side settles each session id
// once: a session founded here and ended stays known (a fresh hello for
// it is refused as StatusDuplicateStream, which sends no client side
// direct), and a fresh stream 0 refused here (hello or BIND) stays
// refused to a late BIND. Together with the live sessions (byID) and the
// places kept for fresh hellos (pending), checked under a.mu, whichever
// of a late BIND and a fresh hello comes second is refused, and a
// refusal that sends a client side direct means no founding delivered
// anything or will. The founded ids also outlive the process when the
// agent has a founded sessions file (founded.go).

// settledFor is how long a settled id is remembered: well past a client
// side's reconnect timeout (default 30 s), during which it founds its
// session again. settledMax bounds the ids of each kind remembered (the
// oldest of the kind go first): founded ids come only with sessions that
// ended, refused ones with refusals any key holder can provoke, so a
// flood of refusals never pushes out a founded id; together about 3 MB.
// A refused id pushed out early matters only to a BIND still unread
// when its stream was reset, which bindSession refuses anyway
// (peerGaveUp).
const (
	settledFor = 5 * time.Minute
	settledMax = 16384
)

// settledIDs are the session ids this agent settled (guarded by a.mu):
// founded (and ended), or refused at stream 0.
type settledIDs struct {
	ids map[stripe.SessionID]settledID
	// order holds each kind's ids in the order they were settled, for
	// expiry and the bound, and n counts each kind's ids: [0] refused,
	// [1] founded.
	order [2][]settledAt
	n     [2]int
}

type settledID struct {
	at      time.Time
	founded bool
}

type settledAt struct {
	id stripe.SessionID
	at time.Time
}

func kindOf(founded bool) int {
	if founded {
		return 1
	}
	return 0
}

// add settles id now; founded outranks refused.
func (s *settledIDs) add(id stripe.SessionID, founded bool, now time.Time) {
	if s.ids == nil {
		s.ids = make(map[stripe.SessionID]settledID)
	}
	s.expire(now)
	prev, had := s.ids[id]
	if had {
		s.n[kindOf(prev.founded)]--
	}
	founded = founded || prev.founded
	s.ids[id] = settledID{at: now, founded: founded}
	k := kindOf(founded)
	s.n[k]++
	s.order[k] = append(s.order[k], settledAt{id, now})
	for s.n[k] > settledMax || len(s.order[k]) > 2*settledMax {
		s.dropFirst(k)
	}
}

// get reports whether id is settled, and whether a session of it was
// founded here.
func (s *settledIDs) get(id stripe.SessionID, now time.Time) (settled, founded bool) {
	e, ok := s.ids[id]
	if !ok || now.Sub(e.at) > settledFor {
		return false, false
	}
	return true, e.founded
}

func (s *settledIDs) expire(now time.Time) {
	for k := range s.order {
		for len(s.order[k]) > 0 && now.Sub(s.order[k][0].at) > settledFor {
			s.dropFirst(k)
		}
		if len(s.order[k]) == 0 {
			s.order[k] = nil // give back what a burst grew
		}
	}
}

// dropFirst forgets the oldest entry of kind k's order; the id goes with
// it unless it was settled again since.
func (s *settledIDs) dropFirst(k int) {
	first := s.order[k][0]
	s.order[k] = s.order[k][1:]
	if e, ok := s.ids[first.id]; ok && e.at.Equal(first.at) && kindOf(e.founded) == k {
		delete(s.ids, first.id)
		s.n[k]--
	}
}
