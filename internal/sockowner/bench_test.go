package sockowner

import (
	"net"
	"sort"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkAcceptWithLookup: what the owner lookup adds to accepting a
// connection from this node, the way connlimit uses it: each round dials,
// accepts and closes a loopback connection, with the lookup of its peer
// and without, alternately (rounds of 200), and reports the median ratio
// of the two and the lookup's own time.
func BenchmarkAcceptWithLookup(b *testing.B) {
	p, ln := benchProberAndListener(b)
	const per = 200
	round := func(lookup bool) (total, inLookup time.Duration) {
		start := time.Now()
		for range per {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			s, err := ln.Accept()
			if err != nil {
				b.Fatal(err)
			}
			if lookup {
				t0 := time.Now()
				if _, found, err := p.PeerOwner(s.LocalAddr().(*net.TCPAddr).AddrPort(), s.RemoteAddr().(*net.TCPAddr).AddrPort()); err != nil || !found {
					b.Fatalf("lookup: found %v, %v", found, err)
				}
				inLookup += time.Since(t0)
			}
			s.Close()
			c.Close()
		}
		return time.Since(start), inLookup
	}
	var ratios, lookups []float64
	for range b.N {
		without, _ := round(false)
		with, in := round(true)
		ratios = append(ratios, float64(with)/float64(without))
		lookups = append(lookups, float64(in.Microseconds())/per)
	}
	median := func(v []float64) float64 { sort.Float64s(v); return v[len(v)/2] }
	b.ReportMetric(median(ratios), "with/without")
	b.ReportMetric(median(lookups), "lookup-µs")
}

// BenchmarkBatchedListing: what a batch of connections that each need a
// listing of the node's sockets (bound to lo) costs per connection, the
// way connlimit's Accept finishes them, against the one-socket lookup of
// as many connections that are not bound (the baseline), in the same
// rounds. Each round holds 1,024 of each kind; the budget is reset
// before each batch, so no round waits for its turn.
func BenchmarkBatchedListing(b *testing.B) {
	p, ln := benchProberAndListener(b)
	const n = 1024
	accept := func(bound bool) []*net.TCPConn {
		var out []*net.TCPConn
		for range n {
			d := net.Dialer{}
			if bound {
				d.Control = func(_, _ string, c syscall.RawConn) error {
					var serr error
					if err := c.Control(func(fd uintptr) { serr = unix.SetsockoptString(int(fd), unix.SOL_SOCKET, unix.SO_BINDTODEVICE, "lo") }); err != nil {
						return err
					}
					return serr
				}
			}
			c, err := d.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { c.Close() })
			s, err := ln.Accept()
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			out = append(out, s.(*net.TCPConn))
		}
		return out
	}
	bound, plain := accept(true), accept(false)
	var ratios, perConn []float64
	for range b.N {
		t0 := time.Now()
		for _, s := range plain {
			if l := p.Begin(s); !l.Done() || !l.Found {
				b.Fatalf("plain connection: done %v, found %v, %v", l.Done(), l.Found, l.Err)
			}
		}
		base := time.Since(t0)
		p.listing = budget{}
		t0 = time.Now()
		ls := make([]*Lookup, 0, n)
		for _, s := range bound {
			ls = append(ls, p.Begin(s))
		}
		p.Finish(ls)
		batch := time.Since(t0)
		for _, l := range ls {
			if !l.Found || l.Err != nil {
				b.Fatalf("bound connection: found %v, %v", l.Found, l.Err)
			}
		}
		ratios = append(ratios, float64(batch)/float64(base))
		perConn = append(perConn, float64(batch.Microseconds())/n)
	}
	median := func(v []float64) float64 { sort.Float64s(v); return v[len(v)/2] }
	b.ReportMetric(median(ratios), "batch/one-socket")
	b.ReportMetric(median(perConn), "batch-µs/conn")
}

// benchProberAndListener is a Prober and a loopback listener, closed
// when the benchmark ends.
func benchProberAndListener(b *testing.B) (*Prober, net.Listener) {
	p, err := New()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	return p, ln
}
