package relay

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/dataplane/stripe"
)

func idOf(n int) stripe.SessionID {
	var id stripe.SessionID
	binary.BigEndian.PutUint64(id[:8], uint64(n))
	return id
}

// TestSettledIDs: founded outranks refused, ids expire after settledFor,
// neither distinct ids nor one id settled again and again (a key
// holder's refused hellos) grow the memory past its bounds, and refusals
// never push out a founded id.
func TestSettledIDs(t *testing.T) {
	var s settledIDs
	now := time.Unix(1000, 0)
	s.add(idOf(1), true, now)
	s.add(idOf(1), false, now.Add(time.Second))
	if settled, founded := s.get(idOf(1), now.Add(2*time.Second)); !settled || !founded {
		t.Errorf("a founded id settled again as refused: settled %v founded %v, want both", settled, founded)
	}
	s.add(idOf(2), false, now)
	if settled, founded := s.get(idOf(2), now); !settled || founded {
		t.Errorf("a refused id: settled %v founded %v", settled, founded)
	}
	if settled, _ := s.get(idOf(2), now.Add(settledFor+time.Second)); settled {
		t.Error("an id still settled past settledFor")
	}
	if settled, _ := s.get(idOf(3), now); settled {
		t.Error("an id never settled is settled")
	}

	s.add(idOf(5), true, now)
	for i := range settledMax + 500 {
		s.add(idOf(10+i), false, now.Add(time.Duration(i)*time.Microsecond))
	}
	if s.n[0] > settledMax || len(s.order[0]) > 2*settledMax || len(s.ids) > settledMax+2 {
		t.Errorf("%d refused ids, %d in order, %d in all after %d distinct refusals; bounds %d and %d",
			s.n[0], len(s.order[0]), len(s.ids), settledMax+500, settledMax, 2*settledMax)
	}
	if settled, founded := s.get(idOf(5), now.Add(time.Second)); !settled || !founded {
		t.Error("a flood of refusals pushed out a founded id")
	}
	if settled, _ := s.get(idOf(10+settledMax+499), now.Add(time.Second)); !settled {
		t.Error("the newest id was dropped")
	}
	for i := range 3 * settledMax {
		s.add(idOf(7), false, now.Add(time.Second+time.Duration(i)*time.Microsecond))
	}
	if len(s.order[0]) > 2*settledMax {
		t.Errorf("one id settled %d times: order holds %d", 3*settledMax, len(s.order[0]))
	}
	if settled, _ := s.get(idOf(7), now.Add(2*time.Second)); !settled {
		t.Error("the id settled again and again was dropped")
	}
	s.add(idOf(8), false, now.Add(time.Hour))
	if len(s.ids) != 1 || len(s.order[0])+len(s.order[1]) != 1 || s.n != [2]int{1, 0} {
		t.Errorf("after settledFor: %d ids, %d+%d in order, counts %v; want only the new one", len(s.ids), len(s.order[0]), len(s.order[1]), s.n)
	}
}
