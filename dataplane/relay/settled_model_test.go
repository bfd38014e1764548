package relay

import (
	mrand "math/rand/v2"
	"testing"
	"time"
)

// TestSettledIDsModel checks settledIDs against a plain model in
// random sequences of adds (refused and founded, repeated ids, equal and
// advancing times, expiry): get answers as the model does, n counts each
// kind's ids exactly, and every id in the map has an entry of its kind
// in that kind's order with its time (so the bounds can reach it).
func TestSettledIDsModel(t *testing.T) {
	type entry struct {
		at      time.Time
		founded bool
	}
	for seed := range uint64(200) {
		r := mrand.New(mrand.NewPCG(seed, 33))
		var s settledIDs
		model := map[int]entry{}
		now := time.Unix(1000, 0)
		for step := range 400 {
			switch r.IntN(10) {
			case 0:
				now = now.Add(time.Duration(r.IntN(3)) * time.Minute)
			case 1, 2:
				now = now.Add(time.Duration(r.IntN(1000)) * time.Millisecond)
			}
			id := r.IntN(30)
			founded := r.IntN(3) == 0
			s.add(idOf(id), founded, now)
			for k, e := range model {
				if now.Sub(e.at) > settledFor {
					delete(model, k)
				}
			}
			model[id] = entry{at: now, founded: founded || model[id].founded}
			probe := now.Add(time.Duration(r.IntN(6)) * time.Minute)
			var n [2]int
			for i := range 30 {
				e, ok := model[i]
				wantSettled := ok && probe.Sub(e.at) <= settledFor
				gs, gf := s.get(idOf(i), probe)
				if gs != wantSettled || (gs && gf != e.founded) {
					t.Fatalf("seed %d step %d id %d: get = %v,%v; model %v (%+v)", seed, step, i, gs, gf, wantSettled, e)
				}
				if ok {
					n[kindOf(e.founded)]++
				}
			}
			if n != s.n || len(s.ids) != n[0]+n[1] {
				t.Fatalf("seed %d step %d: counts %v, %d ids; model %v", seed, step, s.n, len(s.ids), n)
			}
			for id, e := range s.ids {
				k := kindOf(e.founded)
				found := false
				for _, o := range s.order[k] {
					if o.id == id && o.at.Equal(e.at) {
						found = true
						break
					}
				}
				if !found {
					t.Fatalf("seed %d step %d: id %x (%+v) has no entry in its kind's order", seed, step, id[:2], e)
				}
			}
		}
	}
}

// TestSettledIDsBounds: a burst of refusals mixed with kind
// changes (refused, then founded) and repeats keeps each kind within its
// bounds with exact counts, and keeps every founded id.
func TestSettledIDsBounds(t *testing.T) {
	var s settledIDs
	now := time.Unix(1000, 0)
	r := mrand.New(mrand.NewPCG(7, 33))
	founded := map[int]bool{}
	for i := range 3 * settledMax {
		now = now.Add(time.Microsecond)
		id := 100 + r.IntN(2*settledMax)
		if r.IntN(50) == 0 && len(founded) < settledMax/2 {
			s.add(idOf(id), false, now)
			s.add(idOf(id), true, now) // same instant: refused, then founded
			founded[id] = true
			continue
		}
		s.add(idOf(id), false, now)
		if i%4096 == 0 {
			var n [2]int
			for _, e := range s.ids {
				n[kindOf(e.founded)]++
			}
			if n != s.n || s.n[0] > settledMax || s.n[1] > settledMax || len(s.order[0]) > 2*settledMax {
				t.Fatalf("after %d adds: counts %v, actual %v, order %d/%d", i, s.n, n, len(s.order[0]), len(s.order[1]))
			}
		}
	}
	for id := range founded {
		if st, f := s.get(idOf(id), now); !st || !f {
			t.Fatalf("founded id %d lost to refusals: %v %v", id, st, f)
		}
	}
}
