package sdn

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestParseSessions(t *testing.T) {
	got, err := parseSessions("iperf 10.1.0.7:40002 10.2.0.10:5201\nv6 [2001:db8::7]:40000 [2001:db8:2::10]:5201\n")
	if err != nil || len(got) != 2 || got[0].Whitelist != "iperf" || got[1].Client.Port() != 40000 || !got[1].Server.Addr().Is6() {
		t.Fatalf("%+v %v", got, err)
	}
	for _, bad := range []string{"iperf 10.1.0.7:40002\n", "iperf 10.1.0.7 10.2.0.10:5201\n", "a b c d\n", "w 1.2.3.4:5 " + strings.Repeat("9", 100) + "\n"} {
		if _, err := parseSessions(bad); err == nil {
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
