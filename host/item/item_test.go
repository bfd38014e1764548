package item

import "testing"

func TestCanonical(t *testing.T) {
	tests := []struct{ in, want Item }{
		{Item{KindSysctl, "net.ipv4.tcp_rmem", " 4096\t87380  6 "}, Item{KindSysctl, "net.ipv4.tcp_rmem", "4096 87380 6"}},
		{Item{KindIRQ, "eth1", "3,0-2"}, Item{KindIRQ, "eth1", "0-3"}},
		{Item{KindInterface, "eth1/mtu", "09000"}, Item{KindInterface, "eth1/mtu", "9000"}},
		{Item{KindRelay, RelayKeyCPUs, "13"}, Item{KindRelay, RelayKeyCPUs, "13"}},
		{Item{KindSteering, SteeringKeyRoute, "local  0.0.0.0/0 dev lo table 7"}, Item{KindSteering, SteeringKeyRoute, "local 0.0.0.0/0 dev lo table 7"}},
		{Item{"flows", "s1", "  kept as is "}, Item{"flows", "s1", "  kept as is "}},
	}
	for _, tt := range tests {
		got, err := Canonical(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("Canonical(%+v) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []Item{
		{KindIRQ, "eth1", "zero"},
		{KindInterface, "eth1/mtu", "-1"},
		{KindRelay, RelayKeyCPUs, ""},
		{KindSteering, SteeringKeyNftables, "{"},
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
