package sdn

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestAgentStateHysteresis(t *testing.T) {
	fail := errors.New("refused")
	now := time.Now()
	var s agentState
	// The first result decides at once; a failure is a flip from the
	// assumed "up".
	if !s.observe(fail, now, 2, 2) || s.healthy {
		t.Fatalf("first failure: %+v", s)
	}
	steps := []struct {
		err     error
		flipped bool
		healthy bool
	}{
		{nil, false, false}, // one success is not enough to rise
		{fail, false, false},
		{nil, false, false},
		{nil, true, true}, // two in a row
		{fail, false, true},
		{nil, false, true}, // a single loss does not withdraw steering
		{fail, false, true},
		{fail, true, false},
	}
	for i, st := range steps {
		if got := s.observe(st.err, now, 2, 2); got != st.flipped || s.healthy != st.healthy {
			t.Fatalf("step %d: flipped %v healthy %v, want %v %v", i, got, s.healthy, st.flipped, st.healthy)
		}
	}
	var fresh agentState
	if fresh.observe(nil, now, 2, 2) || !fresh.healthy {
		t.Fatalf("first success flips: %+v", fresh)
	}
}

// A refused check (nothing listens: the agent died) takes a healthy
// agent down at once; a timeout or any other failure needs fall of them in
// a row.
func TestAgentStateFallsAtOnceWhenRefused(t *testing.T) {
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := closed.Addr().String()
	closed.Close()
	refused := checkAgent(context.Background(), AgentHealth{HTTP: addr}, 2*time.Second)
	if !conclusive(refused) {
		t.Fatalf("%v is not conclusive", refused)
	}
	now := time.Now()
	var s agentState
	s.observe(nil, now, 2, 3)
	if s.observe(context.DeadlineExceeded, now, 2, 3) || s.observe(errors.New("GET /healthz: 500"), now, 2, 3) || !s.healthy {
		t.Fatalf("two inconclusive failures took it down: %+v", s)
	}
	var t2 agentState
	t2.observe(nil, now, 2, 3)
	if !t2.observe(refused, now, 2, 3) || t2.healthy {
		t.Fatalf("a refusal did not take it down: %+v", t2)
	}
	// Coming back still needs rise successes.
	if t2.observe(nil, now, 2, 3) || !t2.observe(nil, now, 2, 3) {
		t.Fatalf("rise: %+v", t2)
	}
}

func TestCheckAgent(t *testing.T) {
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
		}
	}))
	defer ok.Close()
	sick := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer sick.Close()
	data, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer data.Close()
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	closedAddr := closed.Addr().String()
	closed.Close()
	host := func(s *httptest.Server) string { return strings.TrimPrefix(s.URL, "http://") }
	ctx := context.Background()
	cases := []struct {
		h    AgentHealth
		want string // "" for healthy, else part of the error
	}{
		{AgentHealth{HTTP: host(ok), Data: closedAddr}, ""}, // HTTP decides when given
		{AgentHealth{HTTP: host(sick), Data: data.Addr().String()}, "503"},
		{AgentHealth{HTTP: closedAddr}, "refused"},
		{AgentHealth{Data: data.Addr().String()}, ""},
		{AgentHealth{Data: closedAddr}, "refused"},
		{AgentHealth{}, "no health or data address"},
	}
	for _, c := range cases {
		err := checkAgent(ctx, c.h, 2*time.Second)
		if (c.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.h, err, c.want)
		}
	}
	if (AgentHealth{HTTP: "a:1", Data: "b:2"}).Method() != "http" || (AgentHealth{Data: "b:2"}).Target() != "b:2" {
		t.Error("method/target")
	}
}

func TestParseTarget(t *testing.T) {
	for in, want := range map[string]string{"tcp:10.0.0.1:6653": "10.0.0.1:6653", "10.0.0.1:6653": "10.0.0.1:6653"} {
		if got, err := parseTarget(in); err != nil || got != want {
			t.Errorf("%s: %q, %v", in, got, err)
		}
	}
	for _, bad := range []string{"ptcp:6653", "tcp:10.0.0.1", "unix:/x", ""} {
		if got, err := parseTarget(bad); err == nil {
			t.Errorf("%s accepted as %q", bad, got)
		}
	}
	if s := DatapathIDString(0x5053a1); s != "00:00:00:00:00:50:53:a1" {
		t.Errorf("DatapathIDString = %s", s)
	}
}
