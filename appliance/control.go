package appliance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/sosappliance/sosappliance/appliance/plan"
	"github.com/sosappliance/sosappliance/sdn/flows"
	"golang.org/x/sys/unix"
)

// ControlServer serves the daemon's JSON API on a unix socket that only root
// can open (mode 0600 on the socket, 0700 on a directory we create).
type ControlServer struct {
	path string
	ln   net.Listener
	srv  *http.Server
}

// ListenControl creates the socket, replacing a stale one left by a daemon
// that died, but refusing to take over one that still answers.
func ListenControl(path string, status func() Status, opts ...ControlOption) (*ControlServer, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("control socket directory: %w", err)
	}
	if c, err := net.DialTimeout("unix", path, 200*time.Millisecond); err == nil {
		err := rootsPeer(c, path)
		c.Close()
		if err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("control socket %s is in use by another running daemon", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("remove stale control socket: %w", err)
	}
	// Private before it listens, so no connect ever meets a wider mode.
	ln, err := listenUnixPrivate(path)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(status())
	})
	for _, o := range opts {
		o(mux)
	}
	cs := &ControlServer{path: path, ln: ln, srv: controlLimits.server(mux)}
	go func() { _ = cs.srv.Serve(ln) }()
	return cs, nil
}

// controlLimits leave room for the largest request, a flow plan of up to
// 64 MiB that the daemon may take a minute to answer; only root reaches the
// socket, so they guard against stuck clients more than hostile ones.
var controlLimits = httpLimits{
	readHeader:     5 * time.Second,
	read:           time.Minute,
	write:          3 * time.Minute,
	idle:           2 * time.Minute,
	maxHeaderBytes: 64 << 10,
}

// ControlOption adds an endpoint to the control socket.
type ControlOption func(*http.ServeMux)

// WithFlowPlanner serves POST /v1/flows/plan: given the switches a config
// declares, it answers how their connected flow tables differ, without
// changing them. The controller node's `plan` uses it because the daemon
// holds the switch connections.
func WithFlowPlanner(planFlows func(ctx context.Context, switches []flows.Switch) []FlowPlan) ControlOption {
	return func(mux *http.ServeMux) {
		mux.HandleFunc("POST /v1/flows/plan", func(w http.ResponseWriter, r *http.Request) {
			var switches []flows.Switch
			if err := json.NewDecoder(io.LimitReader(r.Body, 64<<20)).Decode(&switches); err != nil {
				http.Error(w, "bad request: "+err.Error(), http.StatusBadRequest)
				return
			}
			ctx, cancel := context.WithTimeout(r.Context(), time.Minute)
			defer cancel()
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(planFlows(ctx, switches))
		})
	}
}

// FlowPlan is the flow changes one switch needs, as the control socket
// carries them: the plan's own type, so the daemon's answer goes into a
// plan as it is.
type FlowPlan = plan.SwitchPlan

// FetchFlowPlan asks a running daemon to diff switches against their live
// flow tables.
func FetchFlowPlan(ctx context.Context, socket string, switches []flows.Switch) ([]FlowPlan, error) {
	body, err := json.Marshal(switches)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://sosappliance/v1/flows/plan", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	resp, err := controlClient(socket).Do(req)
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w", socket, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("control socket %s: %s", socket, resp.Status)
	}
	var out []FlowPlan
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("control socket %s: bad flow plan: %w", socket, err)
	}
	return out, nil
}

func controlClient(socket string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		// One request per client: a connection kept alive would stay
		// open in the daemon and here, one per call (status --watch
		// left one per tick; found by review, helper-95).
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, "unix", socket)
			if err != nil {
				return nil, err
			}
			if err := rootsPeer(c, socket); err != nil {
				c.Close()
				return nil, err
			}
			return c, nil
		},
	}}
}

// rootsPeer refuses a control socket that another user's process serves
// (SO_PEERCRED): one in a directory others can write may be theirs,
// made before the daemon's, answering status with what they like and
// keeping apply out.
func rootsPeer(c net.Conn, socket string) error {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nil
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if cerr != nil {
		return fmt.Errorf("control socket %s: who serves it: %w", socket, cerr)
	}
	if cred.Uid != 0 && int(cred.Uid) != os.Geteuid() {
		return fmt.Errorf("control socket %s is served by pid %d of uid %d, not by root: another user's process listens there (keep daemon.control_socket in a directory only root can write, such as /run/sosappliance)", socket, cred.Pid, cred.Uid)
	}
	return nil
}

// Close stops serving and removes the socket.
func (cs *ControlServer) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := cs.srv.Shutdown(ctx)
	os.Remove(cs.path)
	return err
}

// FetchStatus asks a running daemon for its status.
func FetchStatus(ctx context.Context, socket string) (*Status, error) {
	client := controlClient(socket)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://sosappliance/v1/status", nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
			return nil, fmt.Errorf("no daemon answers on %s (is `sosappliance run` running, and are you root?): %w", socket, err)
		}
		return nil, fmt.Errorf("control socket %s: %w", socket, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("control socket %s: %s", socket, resp.Status)
	}
	var st Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return nil, fmt.Errorf("control socket %s: bad status: %w", socket, err)
	}
	return &st, nil
}
