package profiles

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/host/item"
)

func TestTable(t *testing.T) {
	if got, want := Names(), []string{"fasterdata-100g", "fasterdata-10g", "fasterdata-40g"}; !slices.Equal(got, want) {
		t.Fatalf("Names = %v, want %v", got, want)
	}
	for _, name := range Names() {
		p, ok := Lookup(name)
		if !ok || p.Name != name {
			t.Fatalf("Lookup(%q) = %+v, %v", name, p, ok)
		}
		sources := map[string]bool{}
		for _, s := range p.Sources {
			if !(strings.HasPrefix(s.URL, "https://fasterdata.es.net/") || s.URL == script.URL) || s.Date == "" || s.Title == "" {
				t.Errorf("%s: source %+v lacks its page, title or date", name, s)
			}
			sources[s.URL] = true
		}
		seen := map[string]bool{}
		for _, s := range p.Sysctls {
			if seen[s.Key] {
				t.Errorf("%s: %s twice", name, s.Key)
			}
			seen[s.Key] = true
			if !sources[s.Source] {
				t.Errorf("%s: %s cites %q, which is not among the profile's sources", name, s.Key, s.Source)
			}
			if item.CanonicalSysctlValue(s.Value) != s.Value || s.Value == "" {
				t.Errorf("%s: %s = %q is not canonical", name, s.Key, s.Value)
			}
			// Only the qdisc depends on what the kernel was built with.
			if s.Optional != (s.Key == "net.core.default_qdisc") {
				t.Errorf("%s: %s optional = %v", name, s.Key, s.Optional)
			}
		}
		if p.MTU != 0 && !sources[p.MTUSource] {
			t.Errorf("%s: mtu cites %q", name, p.MTUSource)
		}
		if p.TxQueueLen != 0 && !sources[p.TxQueueLenSource] {
			t.Errorf("%s: txqueuelen cites %q", name, p.TxQueueLenSource)
		}
		// Every profile sets the buffers: the maxima and the TCP triples,
		// whose largest value the maxima must allow.
		for _, key := range []string{"net.core.rmem_max", "net.core.wmem_max", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"} {
			if !seen[key] {
				t.Errorf("%s sets no %s", name, key)
			}
		}
		value := map[string]string{}
		for _, s := range p.Sysctls {
			value[s.Key] = s.Value
		}
		for tcp, core := range map[string]string{"net.ipv4.tcp_rmem": "net.core.rmem_max", "net.ipv4.tcp_wmem": "net.core.wmem_max"} {
			f := strings.Fields(value[tcp])
			if len(f) != 3 {
				t.Errorf("%s: %s = %q is not a triple", name, tcp, value[tcp])
				continue
			}
			if atoi(t, f[2]) > atoi(t, value[core]) {
				t.Errorf("%s: %s allows %s, above %s = %s", name, tcp, f[2], core, value[core])
			}
		}
	}
	if _, ok := Lookup("fasterdata-1g"); ok {
		t.Errorf("unknown profile found")
	}
}

func atoi(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return n
}

// The buffers grow with the NIC speed.
func TestBuffersGrowWithSpeed(t *testing.T) {
	largest := func(name string) int64 {
		p, _ := Lookup(name)
		for _, s := range p.Sysctls {
			if s.Key == "net.ipv4.tcp_rmem" {
				f := strings.Fields(s.Value)
				return atoi(t, f[len(f)-1])
			}
		}
		t.Fatalf("%s has no tcp_rmem", name)
		return 0
	}
	if a, b, c := largest("fasterdata-10g"), largest("fasterdata-40g"), largest("fasterdata-100g"); !(a < b && b < c) {
		t.Fatalf("tcp_rmem maxima 10g %d, 40g %d, 100g %d do not grow", a, b, c)
	}
}

// Lookup hands out copies: a caller that edits its profile does not edit
// the table.
func TestLookupCopies(t *testing.T) {
	p, _ := Lookup("fasterdata-10g")
	p.Sysctls[0].Value = "pfifo_fast"
	p.Notes[0] = "x"
	again, _ := Lookup("fasterdata-10g")
	if again.Sysctls[0].Value != "fq" || again.Notes[0] == "x" {
		t.Fatalf("the table changed: %+v", again)
	}
}
