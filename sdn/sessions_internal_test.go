package sdn

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/sdn/flows"
	"github.com/sosappliance/sosappliance/sdn/spread"
)

func TestParseSessions(t *testing.T) {
	got, err := parseSessions("iperf 10.1.0.7:40002 10.2.0.10:5201\nv6 [2001:db8::7]:40000 [2001:db8:2::10]:5201\n", 2)
	if err != nil || len(got) != 2 || got[0].Whitelist != "iperf" || got[1].Client.Port() != 40000 || !got[1].Server.Addr().Is6() {
		t.Fatalf("%+v %v", got, err)
	}
	for _, bad := range []string{"iperf 10.1.0.7:40002\n", "iperf 10.1.0.7 10.2.0.10:5201\n", "a b c d\n", "w 1.2.3.4:5 " + strings.Repeat("9", 100) + "\n"} {
		if _, err := parseSessions(bad, 0); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// An agent (or an impostor on its health address) that answers GET
// /sessions with an endless body is cut off at maxSessionsBody.
func TestAgentSessionsBoundsTheBody(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		line := []byte("iperf 10.1.0.7:40002 10.2.0.10:5201\n")
		for range 2 * maxSessionsBody / len(line) {
			if _, err := w.Write(line); err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	_, err := agentSessions(context.Background(), AgentHealth{HTTP: strings.TrimPrefix(srv.URL, "http://")}, 5*time.Second)
	if err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("oversized body: %v", err)
	}
}

// TestDuplicateSessionLineDoesNotFreezeSwitch: an agent (or whatever
// answers on its health address) that listed the same live session twice
// in GET /sessions made flows.Compile refuse the switch's whole flow set
// ("need the same flow entry"), so the controller stopped converging that
// switch, and could no longer withdraw a dead agent's buckets (fail-over,
// fail-open). Found by an independent review; PinSessions pins a session
// once now (flows: TestInconsistentSessionReportsStillCompile).
func TestDuplicateSessionLineDoesNotFreezeSwitch(t *testing.T) {
	mac := func(s string) net.HardwareAddr { m, _ := net.ParseMAC(s); return m }
	a1 := flows.Agent{Name: "a1", MAC: mac("02:00:00:00:01:01"), Port: 3}
	a2 := flows.Agent{Name: "a2", MAC: mac("02:00:00:00:01:02"), Port: 4}
	a3 := flows.Agent{Name: "a3", MAC: mac("02:00:00:00:01:03"), Port: 5}
	sw := flows.Switch{
		Name: "sw", DatapathID: 1, Forwarding: "normal", Agents: []flows.Agent{a1, a2},
		Steers: []flows.Steer{{
			Whitelist: "w", Side: flows.ClientSide,
			Clients: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/24")},
			Server:  netip.MustParseAddr("10.2.0.10"), Port: 5201,
			Agent: a1, Agents: []flows.Agent{a1, a2, a3}, Spread: spread.ModePort, SpreadBits: 2,
			DependsOnSites: [][]string{{"a1", "a2", "a3"}},
		}},
	}
	// a1 lists sessions from every bucket, each twice; those in the
	// buckets of the others are pins.
	var body strings.Builder
	for port := 40000; port < 40016; port += 2 {
		line := fmt.Sprintf("w 10.1.0.7:%d 10.2.0.10:5201\n", port)
		body.WriteString(line + line)
	}
	hostile := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/sessions" {
			_, _ = w.Write([]byte(body.String()))
		}
	}))
	defer hostile.Close()
	honest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer honest.Close()
	dying := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer dying.Close()
	c, err := New(Config{HealthInterval: time.Second, Switches: []flows.Switch{sw}, Agents: map[string]AgentHealth{
		"a1": {HTTP: strings.TrimPrefix(hostile.URL, "http://")},
		"a2": {HTTP: strings.TrimPrefix(honest.URL, "http://")},
		"a3": {HTTP: strings.TrimPrefix(dying.URL, "http://")},
	}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, _, err := c.desiredFor("sw"); err != nil {
		t.Fatalf("before any health round: %v", err)
	}
	c.healthRound(ctx)
	_, _, errUp := c.desiredFor("sw")
	// a3 dies: its buckets must go to the survivors now.
	dying.Close()
	c.healthRound(ctx)
	c.healthRound(ctx)
	c.mu.Lock()
	a3down := c.downLocked("a3")
	c.mu.Unlock()
	_, _, errDown := c.desiredFor("sw")
	t.Logf("a3 down: %v", a3down)
	if errUp != nil || errDown != nil {
		t.Fatalf("one duplicated line from agent a1 leaves switch sw without a compilable flow set, so it is never converged again (fail-over of dead a3 included):\n  all up: %v\n  a3 down: %v", errUp, errDown)
	}
}

// TestAgentRedirectNotFollowed: an agent's health address that answers
// with a redirect could send the controller's health and session requests
// to any URL; a redirect is now an answer that is not 200 (the agent
// counts as down, its sessions unread), and the target is never asked.
func TestAgentRedirectNotFollowed(t *testing.T) {
	var asked atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		_, _ = w.Write([]byte("w 10.1.0.7:40002 10.2.0.10:5201\n"))
	}))
	defer target.Close()
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+r.URL.Path, http.StatusFound)
	}))
	defer agent.Close()
	h := AgentHealth{HTTP: strings.TrimPrefix(agent.URL, "http://")}
	if err := checkAgent(context.Background(), h, 5*time.Second); err == nil || !strings.Contains(err.Error(), "302") {
		t.Errorf("a redirecting health check: %v, want a 302 failure", err)
	}
	if held, err := agentSessions(context.Background(), h, 5*time.Second); err == nil || len(held) != 0 {
		t.Errorf("a redirecting /sessions: %v sessions, err %v; want none and an error", held, err)
	}
	if n := asked.Load(); n != 0 {
		t.Errorf("the redirect's target was asked %d times", n)
	}
}
