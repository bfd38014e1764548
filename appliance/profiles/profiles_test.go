package profiles

import (
	"slices"
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
			if !strings.HasPrefix(s.URL, "https://fasterdata.es.net/") || s.Date == "" || s.Title == "" {
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
	}
	if _, ok := Lookup("fasterdata-1g"); ok {
		t.Errorf("unknown profile found")
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
