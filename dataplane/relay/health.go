package relay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/sosappliance/sosappliance/internal/connlimit"
)

// healthServer answers the controller's probe: GET /healthz -> 200 "ok"
// while the agent is up. It stops with the agent, so a stopped agent fails
// the probe and the controller withdraws its steering flows.
type healthServer struct {
	addr  netip.AddrPort // as configured
	bound netip.AddrPort
	ln    *connlimit.Listener
	srv   *http.Server
	done  chan struct{}
}

// Health says whether the agent serves: started, not shutting down, and
// every listener its configuration names bound. The health endpoint and
// the daemon's status both ask it.
func (a *Agent) Health() (ok bool, why string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	rc := a.cfg.Load()
	switch {
	case !a.started:
		return false, "not started"
	case a.draining:
		return false, "shutting down"
	case rc.TransparentListen.IsValid() && a.tproxy == nil:
		return false, "transparent listener not bound"
	case rc.DataListen.IsValid() && a.data == nil:
		return false, "data listener not bound"
	}
	return true, "serving"
}

// The health endpoint's connection caps: the controllers (one to a few,
// a fresh connection per check) and an operator's curl fit far inside
// them (connlimit).
const (
	healthMaxConns          = 64
	healthMaxConnsPerSource = 8
)

// startHealth serves the health endpoint on addr to the sources in allow
// (any when empty) and, from this node, to root and users.
func startHealth(addr netip.AddrPort, allow []netip.Prefix, users []uint32, a *Agent) (*healthServer, error) {
	raw, err := net.Listen(network(addr.Addr()), addr.String())
	if err != nil {
		return nil, err
	}
	ln := connlimit.New(raw, healthMaxConns, healthMaxConnsPerSource).WithCounts(&a.healthClosed)
	ln.AllowFrom(allow, users)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		if ok, why := a.Health(); !ok {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok"))
	})
	mux.HandleFunc("GET /sessions", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		var b strings.Builder
		for _, t := range a.SessionTuples() {
			fmt.Fprintf(&b, "%s %s %s\n", t.Whitelist, t.Client, t.Server)
		}
		_, _ = w.Write([]byte(b.String()))
	})
	h := &healthServer{
		addr:  addr,
		bound: unmapAddrPort(ln.Addr().(*net.TCPAddr).AddrPort()),
		ln:    ln,
		srv: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: 5 * time.Second,
			ReadTimeout:       5 * time.Second,
			WriteTimeout:      5 * time.Second,
			IdleTimeout:       30 * time.Second,
		},
		done: make(chan struct{}),
	}
	ln.Track(h.srv)
	go func() {
		defer close(h.done)
		if err := h.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("relay: health endpoint stopped", "addr", h.bound, "err", err)
		}
	}()
	return h, nil
}

// healthUsers is health_allow_users as uids; the names this node has no
// user of are logged and admit nobody. allow is health_allow.
func (a *Agent) healthUsers(names []string, allow []netip.Prefix) []uint32 {
	uids, unknown := connlimit.ResolveUsers(names)
	if len(unknown) > 0 {
		a.log.Warn("relay: health_allow_users names users this node does not have; they are not admitted", "users", unknown)
	}
	if err := connlimit.OwnerLookup(); err != nil && len(allow) > 0 {
		a.log.Error("relay: health_allow: the owner of a connection from this node cannot be looked up, so every connection is closed", "err", err)
	}
	return uids
}

// SessionTuple is one live session: its whitelist entry, the client's
// address and port (which pick its spread bucket) and the server's.
type SessionTuple struct {
	Whitelist      string
	Client, Server netip.AddrPort
}

// SessionTuples lists the live sessions, sorted. GET /sessions on the
// health endpoint serves them, one "whitelist client server" line each:
// the controller pins the sessions an agent holds in buckets that are no
// longer its own (an agent returned after a fail-over) with exact-match
// flows until they end.
func (a *Agent) SessionTuples() []SessionTuple {
	a.mu.Lock()
	out := make([]SessionTuple, 0, len(a.sessions))
	for s := range a.sessions {
		out = append(out, SessionTuple{s.whitelist, s.client, s.server})
	}
	a.mu.Unlock()
	slices.SortFunc(out, func(x, y SessionTuple) int {
		return cmp.Or(cmp.Compare(x.Whitelist, y.Whitelist), x.Client.Compare(y.Client), x.Server.Compare(y.Server))
	})
	return out
}

// close stops the endpoint and waits for it.
func (h *healthServer) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := h.srv.Shutdown(ctx); err != nil {
		_ = h.srv.Close()
	}
	<-h.done
}
