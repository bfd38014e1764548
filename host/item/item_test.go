package item

import "testing"

func TestCanonical(t *testing.T) {
	mk := func(kind, key, value string) Item { return Item{Kind: kind, Key: key, Value: value} }
	fromProfile := func(it Item) Item { it.Origin, it.Optional = "profile fasterdata-10g (sos.hcl:3)", true; return it }
	tests := []struct{ in, want Item }{
		{mk(KindSysctl, "net.ipv4.tcp_rmem", " 4096\t87380  6 "), mk(KindSysctl, "net.ipv4.tcp_rmem", "4096 87380 6")},
		{mk(KindIRQ, "eth1", "3,0-2"), mk(KindIRQ, "eth1", "0-3")},
		{mk(KindInterface, "eth1/mtu", "09000"), mk(KindInterface, "eth1/mtu", "9000")},
		{mk(KindRelay, RelayKeyCPUs, "13"), mk(KindRelay, RelayKeyCPUs, "13")},
		{mk(KindSteering, SteeringKeyRoute, "local  0.0.0.0/0 dev lo table 7"), mk(KindSteering, SteeringKeyRoute, "local 0.0.0.0/0 dev lo table 7")},
		{mk("flows", "s1", "  kept as is "), mk("flows", "s1", "  kept as is ")},
		// Origin and Optional travel through unchanged.
		{fromProfile(mk(KindSysctl, "net.core.default_qdisc", " fq")), fromProfile(mk(KindSysctl, "net.core.default_qdisc", "fq"))},
	}
	for _, tt := range tests {
		got, err := Canonical(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("Canonical(%+v) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []Item{
		mk(KindIRQ, "eth1", "zero"),
		mk(KindInterface, "eth1/mtu", "-1"),
		mk(KindRelay, RelayKeyCPUs, ""),
		mk(KindSteering, SteeringKeyNftables, "{"),
	} {
		if _, err := Canonical(bad); err == nil {
			t.Errorf("Canonical(%+v) succeeded", bad)
		}
	}
}

func TestCanonicalIRQValue(t *testing.T) {
	for in, want := range map[string]string{
		"0,1,2":            "0-2",
		"46:1-3 45:0":      "45:0 46:1-3",
		" 45:0,1  46:3,2 ": "45:0-1 46:2-3",
	} {
		if got, err := CanonicalIRQValue(in); err != nil || got != want {
			t.Errorf("CanonicalIRQValue(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "45:", "x:1", "45:1 45:2", "45-1"} {
		if got, err := CanonicalIRQValue(bad); err == nil {
			t.Errorf("CanonicalIRQValue(%q) = %q, want an error", bad, got)
		}
	}
}
