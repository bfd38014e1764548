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
// and neither distinct ids nor one id settled again and again (a key
// holder's refused hellos) grow the memory past its bounds.
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

	for i := range settledMax + 500 {
		s.add(idOf(10+i), false, now.Add(time.Duration(i)*time.Microsecond))
	}
	if len(s.ids) > settledMax || len(s.order) > 2*settledMax {
		t.Errorf("%d ids, %d in order after %d distinct; bounds %d and %d", len(s.ids), len(s.order), settledMax+500, settledMax, 2*settledMax)
	}
	if settled, _ := s.get(idOf(10+settledMax+499), now.Add(time.Second)); !settled {
		t.Error("the newest id was dropped")
	}
	for i := range 3 * settledMax {
		s.add(idOf(7), false, now.Add(time.Second+time.Duration(i)*time.Microsecond))
	}
	if len(s.order) > 2*settledMax {
		t.Errorf("one id settled %d times: order holds %d", 3*settledMax, len(s.order))
	}
	if settled, _ := s.get(idOf(7), now.Add(2*time.Second)); !settled {
		t.Error("the id settled again and again was dropped")
	}
	s.add(idOf(8), false, now.Add(time.Hour))
	if len(s.ids) != 1 || len(s.order) != 1 {
		t.Errorf("after settledFor: %d ids, %d in order; want only the new one", len(s.ids), len(s.order))
	}
}
