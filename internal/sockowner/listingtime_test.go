package sockowner

import (
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestBudgetChargesLongListings: a listing up to ListingTime costs its
// one turn; a longer one takes the turns it paid for, below zero if need
// be, and the next turn waits for them.
func TestBudgetChargesLongListings(t *testing.T) {
	var b budget
	now := time.Unix(1000, 0)
	if _, ok := b.reserve(now, time.Second); !ok {
		t.Fatal("the first turn was refused")
	}
	b.charge(ListingTime / 2)
	b.charge(ListingTime)
	if got, want := b.level(now), float64(ListingsPerSecond-1); got != want {
		t.Fatalf("after listings within ListingTime: %v turns left, want %v", got, want)
	}
	b.charge(ListingTime * 7 / 2)
	if got, want := b.level(now), float64(ListingsPerSecond)-1-2.5; got != want {
		t.Fatalf("after a listing of 3.5 x ListingTime: %v turns left, want %v", got, want)
	}
	b.charge(50 * ListingTime) // 49 turns more: 32.5 below zero
	step := time.Second / ListingsPerSecond
	if got, want := b.until(now), time.Duration(33.5*float64(step)); (got - want).Abs() > time.Millisecond {
		t.Fatalf("after a listing of 50 x ListingTime the next turn is in %v, want %v", got, want)
	}
	if wait, ok := b.reserve(now, time.Second); ok {
		t.Fatalf("a turn 1.7 s away was granted within a second (wait %v)", wait)
	}
	if wait, ok := b.reserve(now.Add(time.Second), time.Second); !ok || (wait-time.Duration(13.5*float64(step))).Abs() > time.Millisecond {
		t.Fatalf("a second later: wait %v, %v; want %v", wait, ok, time.Duration(13.5*float64(step)))
	}
}

// cpuTime is the process's user and system time so far.
func cpuTime(t *testing.T) time.Duration {
	var ru unix.Rusage
	testsupport.RequireNoError(t, unix.Getrusage(unix.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestLongListingsBoundedInTime: a local user heaps up sockets (here
// 60,000 in TIME_WAIT, which no process holds: the kernel walks them on
// every listing, whatever the filter) so that every listing takes tens of
// milliseconds, and asks for listings without pause (a flood of
// device-bound connections). The process spends at most about a fifth of
// one core on them (ListingsPerSecond turns of ListingTime); before a
// long listing took more turns, 20 a second of 25 ms each took half a
// core.
func TestLongListingsBoundedInTime(t *testing.T) {
	if !testsupport.InFreshNetns(t, "ip") {
		return
	}
	testsupport.Commands(t, []string{"ip", "link", "set", "lo", "up"})
	p := newProber(t)
	ln, _ := loopbackListener(t)
	addr := ln.Addr().String()
	const heaped = 60000
	heapTimeWait(t, ln, heaped)
	client := dialBound(t, "lo", netip.AddrPort{}, addr)
	server := acceptTCP(t, ln)
	lookup := func() {
		lk := p.Begin(server)
		if lk.Done() {
			t.Fatal("a connection bound to lo needs no listing")
		}
		p.Finish([]*Lookup{lk})
		if lk.Err != nil || !lk.Found || lk.UID != 0 {
			t.Fatalf("root's client bound to lo: uid %d, found %v, %v", lk.UID, lk.Found, lk.Err)
		}
	}
	// One listing's CPU time, the bucket full.
	cpu0 := cpuTime(t)
	lookup()
	one := cpuTime(t) - cpu0
	if one < 2*ListingTime {
		t.Fatalf("a listing beside %d sockets in TIME_WAIT took %v of CPU: too little to show the bound (want at least %v)", heaped, one, 2*ListingTime)
	}
	// Listings without pause for 3 s, the bucket about empty after the
	// first few; the burst of the full bucket counts once.
	const window = 3 * time.Second
	cpu0, listings0 := cpuTime(t), p.Listings()
	began := time.Now()
	for time.Since(began) < window {
		lookup()
	}
	took, cpu, listings := time.Since(began), cpuTime(t)-cpu0, p.Listings()-listings0
	bound := time.Duration(float64(ListingsPerSecond)*took.Seconds()+ListingsPerSecond) * ListingTime
	t.Logf("one listing %v (the client %v); %d listings in %v took %v of CPU (%.0f%% of a core); the budget's bound %v",
		one.Round(time.Millisecond), client.LocalAddr(), listings, took.Round(time.Millisecond), cpu.Round(time.Millisecond),
		100*cpu.Seconds()/took.Seconds(), bound)
	// Half again for the lookups' other work (each Begin's one-socket
	// lookup, the established checks) and the runtime's.
	if limit := bound * 3 / 2; cpu > limit {
		t.Errorf("listings without pause took %v of CPU in %v, more than the budget's %v (with half again for the rest, %v)",
			cpu, took, bound, limit)
	}
}
