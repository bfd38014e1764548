package sockowner

import (
	"net"
	"sort"
	"testing"
	"time"
)

// BenchmarkAcceptWithLookup: what the owner lookup adds to accepting a
// connection from this node, the way connlimit uses it: each round dials,
// accepts and closes a loopback connection, with the lookup of its peer
// and without, alternately (rounds of 200), and reports the median ratio
// of the two and the lookup's own time.
func BenchmarkAcceptWithLookup(b *testing.B) {
	p, err := New()
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
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
