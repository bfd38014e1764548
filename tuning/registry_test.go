package tuning

import "testing"

func TestExecutorsCoverEveryKind(t *testing.T) {
	exs := Executors(t.TempDir())
	for _, kind := range []string{KindSysctl, KindIRQ, KindInterface, KindRelay, KindSteering} {
		ex, ok := exs[kind]
		if !ok {
			t.Errorf("no executor for %s", kind)
			continue
		}
		if ex.Kind() != kind {
			t.Errorf("executor for %s says it is %s", kind, ex.Kind())
		}
		if _, ok := ex.(Validator); !ok {
			t.Errorf("executor %s does not validate", kind)
		}
	}
}

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
