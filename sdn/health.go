package sdn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sosappliance/sosappliance/sdn/flows"
)

// AgentHealth says how to check one agent.
type AgentHealth struct {
	// HTTP is the "host:port" of the agent's health endpoint; the agent is
	// up while GET http://HTTP/healthz answers 200.
	HTTP string
	// Data is the "host:port" of the agent's data port; without HTTP, the
	// agent is up while a TCP connection to it succeeds.
	Data string
	// MaxSessions is the agent's max_sessions: a GET /sessions answer
	// listing more live sessions than that is refused (0: no cap).
	MaxSessions int
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

// agentClient is the HTTP client of one request to an agent's health
// address: a fresh transport each time (a kept-alive connection would hide
// an agent that stopped accepting new ones), and no redirect followed (an
// agent's answer must not send the controller's requests elsewhere; a
// redirect is an answer that is not 200).
func agentClient() *http.Client {
	return &http.Client{
		Transport:     &http.Transport{DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
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
		resp, err := agentClient().Do(req)
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

// maxSessionsBody bounds what GET /sessions may return (about 16k sessions).
const maxSessionsBody = 1 << 20

// agentSessions reads the live sessions an agent reports on its health
// endpoint (GET /sessions, one "whitelist client server" line each), so
// that the sessions it took over during a fail-over stay pinned to it.
// An agent without the endpoint, or a malformed line, reports none.
func agentSessions(ctx context.Context, h AgentHealth, timeout time.Duration) ([]flows.Held, error) {
	if h.HTTP == "" {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+h.HTTP+"/sessions", nil)
	if err != nil {
		return nil, err
	}
	resp, err := agentClient().Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /sessions: %s", resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxSessionsBody+1))
	if err != nil {
		return nil, err
	}
	if len(body) > maxSessionsBody {
		return nil, fmt.Errorf("GET /sessions: more than %d bytes", maxSessionsBody)
	}
	return parseSessions(string(body), h.MaxSessions)
}

// errTooManySessions is an answer listing more sessions than the agent's
// max_sessions.
var errTooManySessions = errors.New("more sessions than the agent's max_sessions")

// parseSessions parses a GET /sessions answer of at most limit sessions
// (0: any number): an agent holds no more than its max_sessions, so a
// longer answer is a lie, and would be as many exact-match flows on every
// switch of its site.
func parseSessions(body string, limit int) ([]flows.Held, error) {
	var out []flows.Held
	for i, line := range strings.Split(body, "\n") {
		if line == "" {
			continue
		}
		if limit > 0 && len(out) == limit {
			return nil, fmt.Errorf("GET /sessions: %w (%d)", errTooManySessions, limit)
		}
		f := strings.Fields(line)
		if len(f) != 3 {
			return nil, fmt.Errorf("GET /sessions line %d: want \"whitelist client server\"", i+1)
		}
		c, err1 := netip.ParseAddrPort(f[1])
		s, err2 := netip.ParseAddrPort(f[2])
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("GET /sessions line %d: %w", i+1, err)
		}
		out = append(out, flows.Held{Whitelist: f[0], Client: c, Server: s})
	}
	return out, nil
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
	// held are the live sessions it reported last.
	held []flows.Held
	// heldErr is the kind of failure of its last GET /sessions ("" when
	// read): "cap" or "read", so that one is logged once, not every round.
	heldErr string
	// heldErrText is that failure's message ("" when read), for status.
	heldErrText string
	// capBefore is its max_sessions before a reload lowered it: its
	// answers may list up to that many until one fits the new cap (the
	// agent keeps the sessions it holds).
	capBefore int
}

// observe records one result and reports whether the agent's state flipped
// (its first result counts as a flip when it is a failure, since unknown
// agents are treated as up).
// conclusive reports whether a failed check proves the agent is gone
// rather than slow: its host refused the connection, so nothing listens on
// the port (the daemon died or stopped). A timeout, which a congested path
// also causes, is not conclusive and needs fall failures in a row; a
// refusal takes the agent down at once, so that a site with several agents
// moves a dead agent's share to the others within one health interval.
func conclusive(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

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
	switch {
	case ok:
		need = rise
	case conclusive(err):
		need = 1
	}
	if s.streak < need {
		return false
	}
	s.healthy, s.since, s.streak = ok, now, 0
	return true
}

// setHeldErr records the outcome of a GET /sessions (nil: read) and says
// whether it differs from the last one, so that a refusal is logged once
// and not every health round.
func (s *agentState) setHeldErr(err error) bool {
	kind := ""
	s.heldErrText = ""
	if err != nil {
		s.heldErrText = err.Error()
	}
	switch {
	case errors.Is(err, errTooManySessions):
		kind = "cap"
	case err != nil:
		kind = "read"
	}
	if kind == s.heldErr {
		return false
	}
	s.heldErr = kind
	return true
}

// sessionCap is how many live sessions its answers may list.
func (s *agentState) sessionCap() int {
	if s.capBefore > s.target.MaxSessions && s.target.MaxSessions > 0 {
		return s.capBefore
	}
	return s.target.MaxSessions
}

// retarget takes a reloaded target, remembering a cap it lowered.
func (s *agentState) retarget(h AgentHealth) {
	if old := s.sessionCap(); h.MaxSessions > 0 && old > h.MaxSessions {
		s.capBefore = old
	} else {
		s.capBefore = 0
	}
	s.target = h
}

// setHeld records the sessions an agent reported and says whether they
// changed (the pins then change).
func (s *agentState) setHeld(held []flows.Held) bool {
	if slices.Equal(s.held, held) {
		return false
	}
	s.held = held
	return true
}
