package appliance

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// screenStatus is an agent and controller node with more sessions than a
// screen holds and every field at its widest: IPv6 addresses, long names
// and errors.
func screenStatus(now time.Time, sessions int) *Status {
	st := &Status{
		Node: "a-node-with-a-rather-long-host-name.example.org", Roles: []string{"controller", "agent"},
		ConfigHash: strings.Repeat("ab", 32), Serial: 12, StartedAt: now.Add(-26 * time.Hour),
		LastApply: &ApplyInfo{At: now.Add(-time.Minute), Changes: 3, Result: "ok"},
		Reloads:   4, ReloadFails: 1,
		Drift:    DriftInfo{Interval: "1m", Corrections: 7, ByKind: map[string]uint64{"sysctl": 5, "flows": 2}},
		Warnings: []string{"interface eth1 has no IRQs in " + strings.Repeat("/sys/class/net/eth1/device/msi_irqs/", 3)},
		Switches: []SwitchStatus{
			{Name: "edge-switch-of-site-a", DatapathID: "00:00:00:00:00:00:5a:01", Connected: true, Flows: 12345},
			{Name: "sw-b", DatapathID: "00:00:00:00:00:00:5b:01", LastError: "dial tcp 10.0.0.1:6653: connect: connection refused, and then some more"},
		},
		Agents: []AgentStatus{
			{Name: "agent-a", Healthy: true, Local: true, Detail: "3 session(s), 48 stream(s)"},
			{Name: "agent-b", Detail: "http 10.20.2.2:9000: GET /healthz: context deadline exceeded (Client.Timeout exceeded while awaiting headers)"},
		},
	}
	for i := range sessions {
		st.Sessions = append(st.Sessions, SessionStatus{
			Agent: "agent-a", Whitelist: "w",
			Client: fmt.Sprintf("[2001:db8:1234:5678::%x]:%d", i, 40000+i), Server: "10.20.2.10:5201",
			Streams: 64, ReorderDepth: 1000 + i, Throughput: 987.6e6, AgeSeconds: float64(3600*i + 59),
		})
	}
	return st
}

func TestWriteScreenFitsTheTerminal(t *testing.T) {
	now := time.Date(2026, 12, 1, 7, 12, 3, 0, time.UTC)
	for _, c := range []struct {
		name          string
		width, height int
		sessions      int
		want          []string
	}{
		{"80 columns, all sessions", 80, 40, 3, []string{
			"SESSIONS 3  2.96 Gbit/s",
			"  CLIENT                 SERVER                 STR  REORD    THROUGHPUT  AGE",
			"  [2001:db8:1234:5678:…  10.20.2.10:5201         64   1001  987.6 Mbit/s  1h00m",
			"SWITCHES 2 (1 connected)",
			"  edge-switch…  00:00:00:00:00:00:5a:01  yes    12345",
			"AGENTS 2 (1 down)",
			"  agent-a       up*     3 session(s), 48 stream(s)",
			"  agent-b       down    http 10.20.2.2:9000",
		}},
		{"80 columns, more sessions than rows", 80, 24, 40, []string{"SESSIONS 40", "… and 34 more"}},
		{"wide terminal names the agent", 120, 40, 1, []string{"  AGENT       CLIENT", "  agent-a     [2001:db8:1234:5678:…  10.20.2.10:5201"}},
		{"narrow terminal", 40, 24, 2, []string{"sosappliance a-…  07:12:03", "SESSIONS 2"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var b bytes.Buffer
			WriteScreen(&b, screenStatus(now, c.sessions), Screen{Width: c.width, Height: c.height, Tick: 7, Interval: time.Second, Now: now})
			screen := b.String()
			lines := strings.Split(strings.TrimSuffix(screen, "\n"), "\n")
			if len(lines) > c.height {
				t.Errorf("%d lines on a screen of %d", len(lines), c.height)
			}
			for i, l := range lines {
				if n := utf8.RuneCountInString(l); n > c.width {
					t.Errorf("line %d is %d columns wide, the screen %d: %q", i+1, n, c.width, l)
				}
			}
			if !strings.HasSuffix(lines[0], "07:12:03  every 1s  #7") {
				t.Errorf("header %q lacks the time, the period and the tick", lines[0])
			}
			for _, want := range c.want {
				if !strings.Contains(screen, want) {
					t.Errorf("screen lacks %q", want)
				}
			}
			if t.Failed() {
				t.Logf("screen:\n%s", screen)
			}
		})
	}
}

func TestWriteScreenWithoutStatus(t *testing.T) {
	var b bytes.Buffer
	WriteScreen(&b, nil, Screen{Tick: 1, Interval: time.Second, Err: errors.New("control socket /run/sosappliance/control.sock: connection refused")})
	if got := b.String(); !strings.Contains(got, "(no status yet)") || !strings.Contains(got, "error: control socket") {
		t.Errorf("screen without a status:\n%s", got)
	}
}

func TestShortDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-time.Second: "0s", 45 * time.Second: "45s", 12*time.Minute + 30*time.Second: "12m30s",
		3*time.Hour + 7*time.Minute: "3h07m", 5*24*time.Hour + 4*time.Hour: "5d04h",
	} {
		if got := shortDuration(d); got != want {
			t.Errorf("shortDuration(%v) = %q, want %q", d, got, want)
		}
	}
}
