package relay

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"time"
)

// healthServer answers the controller's probe: GET /healthz -> 200 "ok"
// while the agent is up. It stops with the agent, so a stopped agent fails
// the probe and the controller withdraws its steering flows.
type healthServer struct {
	addr  netip.AddrPort // as configured
	bound netip.AddrPort
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

func startHealth(addr netip.AddrPort, a *Agent) (*healthServer, error) {
	ln, err := net.Listen(network(addr.Addr()), addr.String())
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		if ok, why := a.Health(); !ok {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok"))
	})
	h := &healthServer{
		addr:  addr,
		bound: unmapAddrPort(ln.Addr().(*net.TCPAddr).AddrPort()),
		srv: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: 5 * time.Second,
			ReadTimeout:       5 * time.Second,
			WriteTimeout:      5 * time.Second,
			IdleTimeout:       30 * time.Second,
		},
		done: make(chan struct{}),
	}
	go func() {
		defer close(h.done)
		if err := h.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("relay: health endpoint stopped", "addr", h.bound, "err", err)
		}
	}()
	return h, nil
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
