package sdn

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// AgentHealth says how to check one agent.
type AgentHealth struct {
	// HTTP is the "host:port" of the agent's health endpoint; the agent is
	// up while GET http://HTTP/healthz answers 200.
	HTTP string
	// Data is the "host:port" of the agent's data port; without HTTP, the
	// agent is up while a TCP connection to it succeeds.
	Data string
}

// Method is how the agent is checked: "http" or "tcp".
func (h AgentHealth) Method() string {
	if h.HTTP != "" {
		return "http"
	}
	return "tcp"
}

// Target is the address that is checked.
func (h AgentHealth) Target() string {
	if h.HTTP != "" {
		return h.HTTP
	}
	return h.Data
}

// checkAgent runs one health check within timeout.
func checkAgent(ctx context.Context, h AgentHealth, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if h.HTTP != "" {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+h.HTTP+"/healthz", nil)
		if err != nil {
			return err
		}
		// A fresh transport per check: a kept-alive connection would hide
		// an agent that stopped accepting new ones.
		client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("GET /healthz: %w", err)
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /healthz: %s", resp.Status)
		}
		return nil
	}
	if h.Data == "" {
		return fmt.Errorf("no health or data address")
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", h.Data)
	if err != nil {
		return fmt.Errorf("connect data port: %w", err)
	}
	return conn.Close()
}

// agentState follows one agent with rise/fall hysteresis: a single lost
// check must not withdraw steering, since withdrawing breaks every session
// the agents carry.
type agentState struct {
	target    AgentHealth
	checked   bool
	healthy   bool
	streak    int // consecutive results that disagree with healthy
	lastErr   string
	since     time.Time
	lastCheck time.Time
}

// observe records one result and reports whether the agent's state flipped
// (its first result counts as a flip when it is a failure, since unknown
// agents are treated as up).
func (s *agentState) observe(err error, now time.Time, rise, fall int) bool {
	s.lastCheck = now
	if err != nil {
		s.lastErr = err.Error()
	} else {
		s.lastErr = ""
	}
	ok := err == nil
	if !s.checked {
		s.checked, s.healthy, s.since, s.streak = true, ok, now, 0
		return !ok
	}
	if ok == s.healthy {
		s.streak = 0
		return false
	}
	s.streak++
	need := fall
	if ok {
		need = rise
	}
	if s.streak < need {
		return false
	}
	s.healthy, s.since, s.streak = ok, now, 0
	return true
}
