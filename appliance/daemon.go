package appliance

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/hcl/v2"
	"golang.org/x/sys/unix"

	"github.com/sosappliance/sosappliance/appliance/config"
	"github.com/sosappliance/sosappliance/appliance/desired"
	"github.com/sosappliance/sosappliance/appliance/plan"
	"github.com/sosappliance/sosappliance/appliance/store"
	"github.com/sosappliance/sosappliance/dataplane/relay"
	"github.com/sosappliance/sosappliance/host/item"
	"github.com/sosappliance/sosappliance/internal/connlimit"
	"github.com/sosappliance/sosappliance/internal/filetrust"
	"github.com/sosappliance/sosappliance/sdn"
	"github.com/sosappliance/sosappliance/sdn/flows"
	"github.com/sosappliance/sosappliance/tuning"
)

// Options configure a Daemon. Empty paths take the config's values; the
// overrides exist because nodes that share one filesystem (the lab) need
// their own state and sockets.
type Options struct {
	ConfigPath    string
	Node          string
	StatePath     string
	ControlSocket string
	// MetricsListen overrides daemon.metrics_listen when non-nil; "" turns
	// metrics off.
	MetricsListen *string
	// Root is the host tree the file executors use ("/" in production).
	Root string
	// Settle is how long the config file must be quiet before a reload.
	Settle time.Duration
	// DriftInterval overrides daemon.drift_interval when non-zero.
	DriftInterval time.Duration
	Logger        *slog.Logger
	// Executors replaces the host executors (tests inject failures).
	Executors map[string]tuning.Executor
}

// Daemon keeps one node converged to its config file: host items through
// the executors and the store, the agents' relays, and on the controller node
// the switch flows. A failed reload leaves the last good config running.
type Daemon struct {
	opts  Options
	log   *slog.Logger
	execs map[string]tuning.Executor
	note  notifier
	met   *metrics

	// mu guards everything below; converge and reload hold it for their
	// whole run, so status never shows a half-swapped state.
	mu     sync.Mutex
	cfg    *config.Config
	src    config.Source
	want   *desired.Desired
	relays map[string]*runningRelay
	ctl    *runningController // nil: no controller runs
	status Status
	// driftEvery is the drift interval in force (a reload changes it);
	// started holds what the daemon takes only at start.
	driftEvery atomic.Int64
	started    startedWith
	// flowRepairs is the controller's drift repair count already counted.
	flowRepairs uint64
	// driftFail is the drift check failure logged last, while checks
	// fail (see noteDriftErr).
	driftFail driftFailure
	// held are the warnings of the items the last drift check that
	// planned holds (their interface is gone); see withHeld.
	held []string
	// keptNew names the relays that run the config of a reload that
	// failed, since they could not take the last good one back (its
	// listener's port was taken meanwhile): the next reload switches
	// them even when the file is the last good one again.
	keptNew []string

	// stateFile is the state database this daemon opened first (nil
	// before); see openState.
	stateFile atomic.Pointer[stateFile]

	// tainted are the config files (device, inode) found writable by
	// another user while the daemon ran; see trustedConfig.
	taintMu sync.Mutex
	tainted [2]uint64

	// beat is the unix time the main loop last turned, for the watchdog.
	beat atomic.Int64

	// cl is the etcd part (clusternode.go), nil without a cluster block.
	// clNow, ctlNow and pubBase are what the election and the status
	// publisher read without d.mu, which a reload holds for long.
	cl      *runningCluster
	clNow   atomic.Pointer[runningCluster]
	ctlNow  atomic.Pointer[sdn.Controller]
	pubBase atomic.Pointer[publishedBase]
}

// NewDaemon checks the options; Run does the work.
func NewDaemon(opts Options) (*Daemon, error) {
	if opts.ConfigPath == "" {
		return nil, errors.New("daemon: no config path")
	}
	if opts.Node == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("node name: %w (pass --node)", err)
		}
		opts.Node = h
	}
	if opts.Root == "" {
		opts.Root = "/"
	}
	if opts.Settle == 0 {
		opts.Settle = 200 * time.Millisecond
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	execs := opts.Executors
	if execs == nil {
		execs = tuning.Executors(opts.Root)
	}
	d := &Daemon{
		opts:   opts,
		log:    opts.Logger.With("node", opts.Node),
		execs:  execs,
		relays: map[string]*runningRelay{},
	}
	d.note = notifier{log: d.log}
	d.met = newMetrics(d.liveStats)
	d.met.reg.MustRegister(&clusterCollector{d: d})
	d.status = Status{Node: opts.Node, ConfigPath: opts.ConfigPath, StartedAt: time.Now(), Drift: DriftInfo{ByKind: map[string]uint64{}}}
	return d, nil
}

// ConfigError is a config that does not decode or validate; Diagnostics say
// where.
type ConfigError struct {
	Diagnostics hcl.Diagnostics
	Source      config.Source
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("%s: %d problem(s) in the configuration", e.Source.Filename, len(e.Diagnostics.Errs()))
}

func (d *Daemon) statePath(cfg *config.Config) string {
	if d.opts.StatePath != "" {
		return d.opts.StatePath
	}
	return cfg.Daemon.StatePath
}

func (d *Daemon) controlPath(cfg *config.Config) string {
	if d.opts.ControlSocket != "" {
		return d.opts.ControlSocket
	}
	return cfg.Daemon.ControlSocket
}

func (d *Daemon) metricsListen(cfg *config.Config) string {
	if d.opts.MetricsListen != nil {
		return *d.opts.MetricsListen
	}
	return cfg.Daemon.MetricsListen
}

func (d *Daemon) driftInterval(cfg *config.Config) time.Duration {
	if d.opts.DriftInterval > 0 {
		return d.opts.DriftInterval
	}
	return cfg.Daemon.DriftInterval
}

// startedWith is what the daemon takes from the file only at start, as
// the command line and the file resolve it: the state database it
// records the node's original values in, the control socket `status`
// and `apply` find it by, and the metrics address.
type startedWith struct {
	state, control, metrics string
}

// restartOnlyChanged refuses a reload that changes what the daemon takes
// only at start. Taking the rest of the edit would leave the file naming
// a state database that does not hold the node's original values (a
// rollback with the file would put nothing back), or a control socket
// nobody listens on (`apply` would take the node for one without a
// daemon and converge beside it).
func (d *Daemon) restartOnlyChanged(cfg *config.Config) error {
	var errs []error
	if file := d.statePath(cfg); filepath.Clean(file) != filepath.Clean(d.started.state) {
		errs = append(errs, fmt.Errorf("daemon.state_path changed to %q, but the state of this node is in %q, which the daemon opened at start: to move it, stop sosappliance, move %s (and the founded-* files beside it) there, and start it again; or put the path back",
			file, d.started.state, filepath.Base(d.started.state)))
	}
	if file := d.controlPath(cfg); filepath.Clean(file) != filepath.Clean(d.started.control) {
		errs = append(errs, fmt.Errorf("daemon.control_socket changed to %q, but the daemon listens on %q, taken at start: restart sosappliance to move it, or put the path back", file, d.started.control))
	}
	if file := d.metricsListen(cfg); file != d.started.metrics {
		errs = append(errs, fmt.Errorf("daemon.metrics_listen changed to %q, but the daemon serves metrics on %q, taken at start: restart sosappliance to move it, or put the address back", file, d.started.metrics))
	}
	return errors.Join(errs...)
}

// Run converges the node, then keeps it converged until ctx ends or SIGTERM
// or SIGINT arrives; SIGHUP and edits of the file reload. A config that is
// invalid at start-up is an error: there is no last good config to keep.
func (d *Daemon) Run(ctx context.Context) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	c, err := d.load()
	if err != nil {
		return err
	}
	d.mu.Lock() // Status may be asked from now on
	every := d.driftInterval(c.cfg)
	d.driftEvery.Store(int64(every))
	d.status.Drift.Interval = every.String()
	d.started = startedWith{state: d.statePath(c.cfg), control: d.controlPath(c.cfg), metrics: d.metricsListen(c.cfg)}
	d.mu.Unlock()
	d.log.Info("starting", "roles", c.want.Roles, "config", c.src.Filename, "sha256", c.src.Hash()[:12])

	// Held while the daemon runs: a rollback refuses meanwhile (see
	// store.LockAgainstDaemon), and so does a second daemon. It is a lock
	// on the database file, so the first open (which may create it) comes
	// first.
	st, err := d.openState(c.cfg)
	if err != nil {
		return err
	}
	st.Close()
	runLock, err := store.LockForDaemon(d.started.state, 5*time.Second)
	if err != nil {
		return err
	}
	defer runLock.Release()

	ctl, err := ListenControl(d.controlPath(c.cfg), d.Status, WithFlowPlanner(d.planFlows))
	if err != nil {
		return err
	}
	defer ctl.Close()
	d.allowMetrics(c.cfg.Daemon) // in force from the first connection
	stopMetrics, err := d.met.serve(ctx, d.started.metrics)
	if err != nil {
		return err
	}
	defer stopMetrics()

	watcher, err := NewConfigWatcher(d.opts.ConfigPath, d.opts.Settle)
	if err != nil {
		return err
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go func() {
		if err := watcher.Run(watchCtx); err != nil {
			d.log.Error("config watcher stopped", "err", err)
		}
	}()

	// Start-up is a switch from nothing: a failure unwinds what started.
	d.mu.Lock()
	err = d.switchTo(ctx, c)
	d.mu.Unlock()
	if err != nil {
		return err
	}
	d.met.reloads.WithLabelValues("ok")
	d.note.ready(d.statusLine())
	d.log.Info("ready", "serial", d.Status().Serial)

	go d.note.watchdog(ctx, func() bool {
		// The loop turns at least every drift interval; allow three.
		return time.Since(time.Unix(d.beat.Load(), 0)) < 3*time.Duration(d.driftEvery.Load())+10*time.Second
	})
	drift := time.NewTicker(every)
	defer drift.Stop()
	for {
		d.beat.Store(time.Now().Unix())
		if now := time.Duration(d.driftEvery.Load()); now != every {
			every = now // a reload changed it
			drift.Reset(every)
		}
		select {
		case <-ctx.Done():
			d.mu.Lock()
			cfg := d.cfg
			d.mu.Unlock()
			d.note.stopping(shutdownGrace(cfg) + stopMargin)
			d.log.Info("stopping")
			d.shutdown(cfg)
			return nil
		case <-hup:
			d.log.Info("reload requested by SIGHUP")
			d.reload(ctx)
		case <-watcher.C:
			d.log.Info("config file changed")
			d.reload(ctx)
		case <-drift.C:
			if d.keptNewRelays() {
				// A relay still runs the config of a reload that failed
				// (keptNew): the drift check takes it back to the last
				// good one, as a reload of the file does.
				d.log.Info("a relay still runs the config of a reload that failed; reloading to take the last good config back")
				d.reload(ctx)
				if !d.keptNewRelays() {
					continue
				}
			}
			d.checkDrift(ctx)
		}
	}
}

// candidate is a config decoded, validated and compiled, with everything
// built that can be built without touching the running node: every relay
// with its PSK joined and checked by the relay itself, the controller with
// its certificates loaded and its switches checked.
type candidate struct {
	cfg    *config.Config
	src    config.Source
	want   *desired.Desired
	relays map[string]*relayCandidate
	ctl    *controllerCandidate // nil: this node runs no controller
	// cluster is nil without a cluster block.
	cluster *clusterCandidate
}

// relayCandidate is a relay built but not started.
type relayCandidate struct {
	cfg   relay.Config
	agent *relay.Agent
}

// controllerCandidate is a controller's config; the listener is bound when
// it starts.
type controllerCandidate struct {
	spec *desired.Controller
	cfg  sdn.Config
}

// runningRelay is a relay the daemon runs, with the config it runs.
type runningRelay struct {
	agent *relay.Agent
	cfg   relay.Config
}

// runningController is the controller the daemon runs.
type runningController struct {
	ctl  *sdn.Controller
	spec *desired.Controller
	// roles: one of several controllers, elected on etcd.
	roles bool
	stop  context.CancelFunc
	done  chan error
}

// load decodes, validates and compiles the file, and builds everything the
// new config needs that involves I/O but changes nothing: it reads the PSK
// and TLS files and lets the relays and the controller check their specs.
func (d *Daemon) load() (*candidate, error) {
	cfg, src, want, err := d.compile()
	if err != nil {
		return nil, err
	}
	c := &candidate{cfg: cfg, src: src, want: want, relays: map[string]*relayCandidate{}}
	psks := map[string][]byte{}
	for _, a := range want.Agents {
		rc := a.Relay
		psk, ok := psks[rc.PSKFile]
		if !ok {
			if psk, err = LoadPSK(rc.PSKFile); err != nil {
				return nil, err
			}
			psks[rc.PSKFile] = psk
		}
		rc.PSK = psk
		rc.FoundedFile = FoundedFile(d.statePath(cfg), a.Name)
		if rc.AgentKeyFile != "" {
			if rc.AgentKey, err = LoadAgentKey(rc.AgentKeyFile); err != nil {
				return nil, fmt.Errorf("agent %s: %w", a.Name, err)
			}
		}
		agent, err := relay.New(rc, d.log.With("agent", a.Name))
		if err != nil {
			return nil, fmt.Errorf("relay %s: %w", a.Name, err)
		}
		c.relays[a.Name] = &relayCandidate{cfg: rc, agent: agent}
	}
	if spec := want.Controller; spec != nil {
		if c.ctl, err = d.buildController(spec, want.Cluster != nil); err != nil {
			return nil, fmt.Errorf("controller: %w", err)
		}
	}
	if c.cluster, err = d.buildCluster(want); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	return c, nil
}

// CheckNodeFiles reads what `run` on this host as node would read before
// it starts anything: the PSK, each agent's key against its public_key,
// the controller's and the cluster's TLS files; and lets the relays and
// the controller check their specs. It changes nothing. `validate
// --this-node` runs it, so that the package does not restart the daemon
// onto a file whose key files keep it from starting.
func CheckNodeFiles(configPath, node string) error {
	d, err := NewDaemon(Options{ConfigPath: configPath, Node: node, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	_, err = d.load()
	return err
}

// trustedConfig refuses a config file that a user other than root could
// change, or that another user's process holds open for writing (package
// filetrust); and, while the daemon runs, the file it last found so,
// fixed in place by a chmod or chown: another user may have written it
// through a descriptor opened before, and closed it since. Replacing the
// file with a new one (another inode) is the fix; the taint is one file,
// the last refused, and goes when the path holds another.
func (d *Daemon) trustedConfig() error {
	path := d.opts.ConfigPath
	err := filetrust.Check("config file", path)
	var fe *filetrust.Error
	d.taintMu.Lock()
	defer d.taintMu.Unlock()
	if errors.As(err, &fe) {
		d.tainted = [2]uint64{fe.Dev, fe.Ino}
	}
	if err != nil {
		return err
	}
	var st syscall.Stat_t
	if syscall.Stat(path, &st) != nil {
		return nil // its reader says why
	}
	if d.tainted != [2]uint64{uint64(st.Dev), st.Ino} {
		d.tainted = [2]uint64{} // replaced: another file now
		return nil
	}
	return fmt.Errorf("config file %s is the file this daemon found another user could write, fixed in place: "+
		"a chmod or chown leaves in what a writer that opened it then wrote, so replace it with a new file of root's, after reading it "+
		"(install -m 0644 -o root -g root %s %s.new && mv %s.new %s)", path, path, path, path, path)
}

// loadConfigFile is config.LoadFile; a test makes it panic.
var loadConfigFile = config.LoadFile

// compile decodes, validates and compiles the file. A panic in that
// (a bug: no file should cause one) is a failed load, not the end of the
// daemon, its relays and its controller with it: the last good config
// keeps running.
func (d *Daemon) compile() (cfg *config.Config, src config.Source, want *desired.Desired, err error) {
	defer func() {
		if p := recover(); p != nil {
			d.log.Error("reading the config file panicked; this is a bug, please report it with the file",
				"path", d.opts.ConfigPath, "panic", p, "stack", string(debug.Stack()))
			cfg, src, want = nil, config.Source{}, nil
			err = fmt.Errorf("reading %s failed on a bug in sosappliance (logged with its stack; please report it): %v", d.opts.ConfigPath, p)
		}
	}()
	if err := d.trustedConfig(); err != nil {
		return nil, config.Source{Filename: d.opts.ConfigPath}, nil, err
	}
	cfg, src, diags := loadConfigFile(d.opts.ConfigPath)
	if diags.HasErrors() {
		return nil, src, nil, &ConfigError{Diagnostics: diags, Source: src}
	}
	// A file taken with warnings (a whitelist that carries every port)
	// says so, as validate would.
	for _, w := range diags {
		d.log.Warn("config warning", "warning", diagText(w))
	}
	want, err = desired.Compile(cfg, d.opts.Node)
	if err != nil {
		return nil, src, nil, err
	}
	return cfg, src, want, nil
}

func (d *Daemon) buildController(spec *desired.Controller, roles bool) (*controllerCandidate, error) {
	var serverTLS *tls.Config
	if f := spec.TLS; f != nil {
		var err error
		if serverTLS, err = sdn.LoadTLS(f.CertFile, f.KeyFile, f.CAFile); err != nil {
			return nil, fmt.Errorf("tls: %w", err)
		}
	}
	resync := spec.ResyncInterval
	if d.opts.DriftInterval > 0 {
		resync = d.opts.DriftInterval
	}
	health := map[string]sdn.AgentHealth{}
	for name, h := range spec.Health {
		health[name] = sdn.AgentHealth{HTTP: h.HTTP, Data: h.Data.String(), MaxSessions: h.MaxSessions}
	}
	cfg := sdn.Config{
		TLS:               serverTLS,
		Keepalive:         spec.Keepalive,
		HealthInterval:    spec.HealthInterval,
		HealthTimeout:     spec.HealthTimeout,
		HealthFall:        spec.HealthFall,
		ResyncInterval:    resync,
		RemoveFlowsOnStop: spec.RemoveFlowsOnStop,
		Roles:             roles,
		Switches:          spec.Switches,
		Agents:            health,
	}
	// New checks the switches and starts nothing; the one that runs is
	// made again with its listener.
	if _, err := sdn.New(cfg, nil); err != nil {
		return nil, err
	}
	return &controllerCandidate{spec: spec, cfg: cfg}, nil
}

// retakeTLS gives a running controller its TLS files as read for this
// reload: a certificate, key or switch CA replaced under the same path
// takes effect for the switches that connect from now on, and connected
// switches the CAs in force no longer verify are dropped.
func (d *Daemon) retakeTLS(rc *runningController, conf *tls.Config) {
	changed, dropped, err := rc.ctl.SetTLS(conf)
	if err != nil {
		d.log.Error("controller TLS not reloaded", "err", err)
		return
	}
	if changed {
		attrs := []any{}
		if leaf := conf.Certificates[0].Leaf; leaf != nil {
			attrs = append(attrs, "subject", leaf.Subject.String(), "not_after", leaf.NotAfter.Format(time.RFC3339))
		}
		d.log.Info("controller TLS files changed; switches that connect from now on get them", attrs...)
	}
	if dropped > 0 {
		d.log.Warn("dropped connected switches whose certificates the switch CAs in force no longer verify (status says which)", "switches", dropped)
	}
}

// sameControllerSettings says whether a running controller can take the
// new switches and agents in place; otherwise a new one replaces it.
func sameControllerSettings(a, b *desired.Controller) bool {
	sameTLS := (a.TLS == nil) == (b.TLS == nil)
	if sameTLS && a.TLS != nil {
		sameTLS = *a.TLS == *b.TLS
	}
	return a.Listen == b.Listen && a.Keepalive == b.Keepalive && a.HealthInterval == b.HealthInterval &&
		a.HealthTimeout == b.HealthTimeout && a.HealthFall == b.HealthFall && a.ResyncInterval == b.ResyncInterval &&
		a.RemoveFlowsOnStop == b.RemoveFlowsOnStop && sameTLS
}

// listenController binds the OpenFlow listener at once, so a bad or taken
// address fails the reload that asks for it. SO_REUSEPORT lets a new
// controller bind the address of the one it replaces before that one
// stops, as Caddy's listeners do; a socket of anyone else that does not
// set it still makes the bind fail.
func listenController(ctx context.Context, addr string) (net.Listener, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
		}); err != nil {
			return err
		}
		return serr
	}}
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("openflow listen: %w", err)
	}
	return ln, nil
}

// switchTo moves the node from what runs now to c, the way Caddy reloads.
// Everything that can fail without touching the node has failed already
// (load, and here the host plan); then the new relays start and the new
// controller binds its listener, the running relays take their new config
// (each binds a changed listener before it closes the old one), the host
// items are applied, the controller swaps, and last the parts c no longer
// has stop. When a step fails, every step before it is unwound in reverse
// and the old config keeps running. Start-up is a switch from nothing.
// d.mu is held.
func (d *Daemon) switchTo(ctx context.Context, c *candidate) (err error) {
	var undo []func()
	var keptNew []string // relays that could not go back
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
			if len(keptNew) > 0 {
				// Status, metrics and the cluster show the PSK these
				// relays hold now.
				d.notePSKLocked()
				d.snapshotLocked()
				err = &keptNewError{err: err, kept: keptNew}
			}
		}
	}()
	grace := c.cfg.Daemon.ShutdownTimeout

	// The host plan validates every item (unknown sysctls, offline CPUs)
	// before anything starts. The store stays open until the host is
	// done, so the plan cannot go stale, and no longer: the CLI reads it
	// while old relays drain.
	st, err := d.openState(c.cfg)
	if err != nil {
		return err
	}
	stOpen := true
	closeStore := func() {
		if stOpen {
			st.Close()
			stOpen = false
		}
	}
	defer closeStore()
	hostPlan, err := Plan(ctx, st, d.execs, c.want.Items, d.opts.Node, c.src.Hash())
	if err != nil {
		d.recordApply(hostPlan, Result{}, err)
		return fmt.Errorf("plan host state: %w", err)
	}
	records, err := st.Records()
	if err != nil {
		return err
	}
	var hostBefore []item.Item
	for _, r := range records {
		hostBefore = append(hostBefore, item.Item{Kind: r.Kind, Key: r.Key, Value: r.Desired})
	}

	// Start: new relays bind their listeners.
	names := slices.Sorted(maps.Keys(c.relays))
	for _, name := range names {
		if d.relays[name] != nil {
			continue
		}
		rc := c.relays[name]
		if err := rc.agent.Start(context.WithoutCancel(ctx)); err != nil {
			return fmt.Errorf("relay %s: %w", name, err)
		}
		undo = append(undo, func() { d.stopRelay(name, rc.agent, grace) })
		// The relay logs "relay started" itself, with its listeners.
	}
	// The new controller binds its listener.
	old := d.ctl
	var ln net.Listener
	replaceController := c.ctl != nil && (old == nil || !sameControllerSettings(old.spec, c.ctl.spec) || old.roles != c.ctl.cfg.Roles)
	if replaceController && c.ctl.spec.Listen != "" {
		if ln, err = listenController(ctx, c.ctl.spec.Listen); err != nil {
			return fmt.Errorf("controller: %w", err)
		}
		undo = append(undo, func() { ln.Close() })
	}
	// Running relays take their new config; live sessions survive.
	for _, name := range names {
		r := d.relays[name]
		if r == nil {
			continue
		}
		if err := r.agent.Update(c.relays[name].cfg); err != nil {
			return fmt.Errorf("relay %s: %w", name, err)
		}
		undo = append(undo, func() {
			if err := r.agent.Update(r.cfg); err != nil {
				// The relay runs the new config: the record says so, for
				// the PSK id shown and the next reload (keptNew).
				d.log.Error("putting back the relay's last good config failed; it keeps the new one", "agent", name, "err", err)
				r.cfg = c.relays[name].cfg
				if !slices.Contains(d.keptNew, name) {
					d.keptNew = append(d.keptNew, name)
				}
				keptNew = append(keptNew, fmt.Sprintf("relay %s (%v)", name, err))
			}
		})
	}

	// The host: tuning and steering toward listeners that now run.
	res, err := Apply(ctx, st, d.execs, hostPlan)
	d.recordApply(hostPlan, res, err)
	for _, ch := range res.Done {
		d.log.Info("applied", "action", string(ch.Action), "kind", ch.Kind, "key", ch.Key, "after", ch.After)
	}
	closeStore()
	if len(res.Done) > 0 {
		undo = append(undo, func() { d.revertHost(ctx, c.cfg, hostBefore) })
	}
	if err != nil {
		return fmt.Errorf("apply host state: %w", err)
	}

	// A changed cluster part gets its etcd client (it connects in the
	// background, and runs once swapped in below); before the controller,
	// so that nothing fails once a running controller took the new
	// switches in place.
	var nextCluster *runningCluster
	if c.cluster != nil && (d.cl == nil || !sameCluster(d.cl.cand, c.cluster)) {
		if nextCluster, err = d.openCluster(c.cluster); err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
		if d.cl != nil {
			d.log.Info("the cluster block or the etcd CA changed: a new etcd client replaces the running one (a controller campaigns again)")
		}
		undo = append(undo, nextCluster.close) // not started: no publisher waits
	}

	// Swap the controller.
	var next *runningController
	switch {
	case replaceController:
		cfg := c.ctl.cfg
		cfg.Listener = ln
		ctl, err := sdn.New(cfg, d.log.With("role", "controller"))
		if err != nil {
			return fmt.Errorf("controller: %w", err)
		}
		runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan error, 1)
		go func() { done <- ctl.Run(runCtx) }()
		next = &runningController{ctl: ctl, spec: c.ctl.spec, roles: cfg.Roles, stop: cancel, done: done}
		d.log.Info("controller started", "listen", c.ctl.spec.Listen, "switches", len(c.ctl.spec.Switches))
	case c.ctl != nil:
		if err := old.ctl.Update(c.ctl.cfg.Switches, c.ctl.cfg.Agents); err != nil {
			return fmt.Errorf("controller: %w", err)
		}
		old.spec = c.ctl.spec
		next = old
		d.retakeTLS(old, c.ctl.cfg.TLS)
	}

	// Nothing fails from here: stop what the new config no longer has.
	if old != nil && old != next {
		d.stopController(old)
	}
	if next != old {
		d.flowRepairs = 0
	}
	d.ctl = next
	if next != nil {
		d.ctlNow.Store(next.ctl)
	} else {
		d.ctlNow.Store(nil)
	}
	if nextCluster == nil {
		d.retakeClusterTLS(c.cluster)
	}
	d.swapCluster(c.cluster, nextCluster)
	for name, r := range d.relays {
		if c.relays[name] == nil {
			d.stopRelay(name, r.agent, grace)
			delete(d.relays, name)
		}
	}
	for _, name := range names {
		if r := d.relays[name]; r != nil {
			r.cfg = c.relays[name].cfg
		} else {
			d.relays[name] = &runningRelay{agent: c.relays[name].agent, cfg: c.relays[name].cfg}
		}
	}
	d.cfg, d.src, d.want = c.cfg, c.src, c.want
	d.keptNew = nil
	d.status.Roles = c.want.Roles
	d.status.ConfigHash = c.src.Hash()
	d.met.setConfig(d.status.ConfigHash)
	d.notePSKLocked()
	d.allowMetrics(c.cfg.Daemon)
	d.snapshotLocked()
	return nil
}

// allowMetrics puts daemon.metrics_allow and metrics_allow_users in force.
func (d *Daemon) allowMetrics(c config.Daemon) {
	if unknown := d.met.allowFrom(c.MetricsAllow, c.MetricsAllowUsers); len(unknown) > 0 {
		d.log.Warn("metrics_allow_users names users this node does not have; they are not admitted", "users", unknown)
	}
	if err := connlimit.OwnerLookup(); err != nil && len(c.MetricsAllow) > 0 {
		d.log.Error("metrics_allow: the owner of a connection from this node cannot be looked up, so every connection is closed", "err", err)
	}
}

// revertHost puts the host items back to what the store owned before a
// switch that failed.
func (d *Daemon) revertHost(ctx context.Context, cfg *config.Config, items []item.Item) {
	hash := ""
	if d.src.Filename != "" {
		hash = d.src.Hash()
	}
	// An item whose interface went away meanwhile is held, as in a
	// drift check, so the rest is still put back.
	p, res, err := d.withStore(cfg, func(st storeHandle) (plan.Plan, Result, error) {
		p, _, res, err := ConvergeHolding(ctx, st, d.execs, items, d.opts.Node, hash)
		return p, res, err
	})
	d.recordApply(p, res, err)
	if err != nil {
		d.log.Error("putting back the last good host state failed", "err", err)
	}
}

// recordApply shows a host apply in status and metrics.
func (d *Daemon) recordApply(p plan.Plan, res Result, err error) {
	info := &ApplyInfo{At: time.Now(), Changes: len(res.Done), Result: "ok"}
	if err != nil {
		info.Result = err.Error()
		d.met.applies.WithLabelValues("failed").Inc()
	} else {
		d.met.applies.WithLabelValues("ok").Inc()
	}
	d.status.LastApply = info
	if err == nil {
		// Every item was taken but those the plan holds (records of an
		// interface that is away).
		d.noteHeld(heldOf(p))
	}
	d.status.Warnings = d.withHeld(warningsOf(p))
	if res.Serial > 0 {
		d.status.Serial = res.Serial
		d.met.serial.Set(float64(res.Serial))
	} else if err == nil {
		d.status.Serial = p.Serial
		d.met.serial.Set(float64(p.Serial))
	}
	d.snapshotLocked()
}

// noteHeld makes held the items held now, replacing those held before;
// each is logged once, when it starts being held.
func (d *Daemon) noteHeld(held []plan.Warning) {
	now := warningsOf(plan.Plan{Warnings: held})
	for _, w := range now {
		if !slices.Contains(d.held, w) {
			d.log.Warn("item held", "warning", w)
		}
	}
	d.held = now
}

// heldOf are the warnings of a plan's held items.
func heldOf(p plan.Plan) []plan.Warning {
	var out []plan.Warning
	for _, w := range p.Warnings {
		if w.Held {
			out = append(out, w)
		}
	}
	return out
}

// withHeld adds the warnings of the items the drift check holds to ws:
// they stay in status while the items are held, whatever else ran since.
func (d *Daemon) withHeld(ws []string) []string {
	for _, w := range d.held {
		if !slices.Contains(ws, w) {
			ws = append(ws, w)
		}
	}
	return ws
}

func warningsOf(p plan.Plan) []string {
	var out []string
	for _, w := range p.Warnings {
		out = append(out, fmt.Sprintf("%s %s: %s", w.Kind, w.Key, w.Message))
	}
	return out
}

func (d *Daemon) stopRelay(name string, r *relay.Agent, grace time.Duration) {
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := r.Shutdown(sctx); err != nil {
		d.log.Warn("relay shutdown", "agent", name, "err", err)
	}
	d.log.Info("relay stopped", "agent", name)
}

// stopController stops a controller; switch flows stay (fail_mode=secure)
// unless its config removes them on stop.
func (d *Daemon) stopController(rc *runningController) {
	rc.stop()
	if err := <-rc.done; err != nil && !errors.Is(err, context.Canceled) {
		d.log.Warn("controller stopped", "err", err)
	}
}

// reload builds the file's config and switches to it; when any step fails,
// the last good config keeps running and the failure shows in the log,
// status and metrics.
func (d *Daemon) reload(ctx context.Context) {
	d.note.reloading()
	defer func() { d.note.ready(d.statusLine()) }()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.status.Reloads++
	c, err := d.load()
	unedited := err == nil && c.src.Hash() == d.src.Hash() && (d.cl == nil || c.cluster == nil || sameCluster(d.cl.cand, c.cluster)) &&
		len(d.keptNew) == 0
	var retaken []string
	if unedited {
		retaken, err = d.retakeKeys(c)
	}
	if unedited && err == nil {
		// SIGHUP without an edit: converge again, as a drift check, and
		// take the key files and the controller's and the etcd client's
		// TLS files read again (replaced in place). An etcd CA replaced
		// in place needs a new etcd client: that reload switches as an
		// edit does.
		if d.ctl != nil && c.ctl != nil {
			d.retakeTLS(d.ctl, c.ctl.cfg.TLS)
		}
		d.retakeClusterTLS(c.cluster)
		d.met.reloads.WithLabelValues("ok").Inc()
		result := "unchanged"
		if len(retaken) > 0 {
			result = "unchanged, but took a replaced " + strings.Join(retaken, ", ")
		}
		d.status.LastReload = &ReloadInfo{At: time.Now(), Hash: c.src.Hash(), Result: result}
		d.checkDriftLocked(ctx)
		return
	}
	if err == nil && !unedited {
		if err = d.restartOnlyChanged(c.cfg); err == nil {
			err = d.switchTo(ctx, c)
		}
	}
	if err != nil {
		d.status.ReloadFails++
		d.met.reloads.WithLabelValues("failed").Inc()
		d.status.LastReload = &ReloadInfo{At: time.Now(), Result: "failed, still running the last good config: " + err.Error()}
		if kn := (*keptNewError)(nil); errors.As(err, &kn) {
			d.status.LastReload.Result = "failed: " + err.Error()
		} else if len(d.keptNew) > 0 {
			d.status.LastReload.Result = "failed: " + err.Error() + "; " + d.keptNewText()
		}
		var ce *ConfigError
		if errors.As(err, &ce) {
			d.status.LastReload.Hash = ce.Source.Hash()
			for _, diag := range ce.Diagnostics {
				text := diagText(diag)
				if diag.Severity != hcl.DiagError {
					d.log.Warn("reload: a warning of the refused file", "warning", text)
					continue
				}
				d.log.Error("reload refused", "problem", text)
				if len(d.status.LastReload.Problems) < maxReloadProblems {
					d.status.LastReload.Problems = append(d.status.LastReload.Problems, text)
				}
			}
			return
		}
		if len(d.keptNew) > 0 {
			d.log.Error("reload failed; the last good config keeps running but for the relays that could not take it back", "err", err, "agents", strings.Join(d.keptNew, ","))
			return
		}
		d.log.Error("reload failed; the last good config keeps running", "err", err)
		return
	}
	d.met.reloads.WithLabelValues("ok").Inc()
	every := d.driftInterval(c.cfg)
	d.driftEvery.Store(int64(every))
	d.status.Drift.Interval = every.String()
	d.status.LastReload = &ReloadInfo{At: time.Now(), Hash: c.src.Hash(), Result: "ok"}
	d.log.Info("reloaded", "sha256", c.src.Hash()[:12], "serial", d.status.Serial)
}

// keptNewError is a switch that failed and was unwound, but for relays
// that could not take their last good config back and run the new one.
type keptNewError struct {
	err  error
	kept []string // "relay a1 (why)"
}

func (e *keptNewError) Error() string {
	return fmt.Sprintf("%v; unwound, but %s could not take the last good config back and runs this one until a reload succeeds", e.err, strings.Join(e.kept, " and "))
}

func (e *keptNewError) Unwrap() error { return e.err }

// keptNewRelays says whether a relay still runs the config of a reload
// that failed.
func (d *Daemon) keptNewRelays() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.keptNew) > 0
}

// keptNewText says which relays still run the config of an earlier
// reload that failed (keptNew), for a later failure's status.
func (d *Daemon) keptNewText() string {
	return fmt.Sprintf("the last good config keeps running, but relay %s still runs the config of an earlier reload that failed, since it could not take the last good one back",
		strings.Join(d.keptNew, ", relay "))
}

// retakeKeys gives each running relay the PSK read for a reload of an
// unedited file, when it differs from the one it runs with: a psk_file
// replaced under the same path is taken as an edit takes it (idle pooled
// streams under the old key are closed and the pool refills; live
// sessions keep their streams). A key_file replaced by another key never
// gets here: load refuses a key that is not the file's public_key, and a
// new key takes an edit of it. It returns what each relay took, as
// "psk_file of a1"; a relay that refuses puts every relay back.
func (d *Daemon) retakeKeys(c *candidate) ([]string, error) {
	var retaken []string
	var undo []func()
	for _, name := range slices.Sorted(maps.Keys(d.relays)) {
		r, next := d.relays[name], c.relays[name]
		if next == nil || bytes.Equal(r.cfg.PSK, next.cfg.PSK) {
			continue
		}
		if err := r.agent.Update(next.cfg); err != nil {
			for _, f := range slices.Backward(undo) {
				f()
			}
			return nil, fmt.Errorf("relay %s: %w", name, err)
		}
		prev := r.cfg
		undo = append(undo, func() {
			if err := r.agent.Update(prev); err != nil {
				// The relay keeps the new key: say so.
				d.log.Error("putting back the relay's last good config failed", "agent", name, "err", err)
				return
			}
			r.cfg = prev
		})
		r.cfg = next.cfg
		d.log.Info("psk_file replaced in place; the relay takes it", "agent", name)
		retaken = append(retaken, "psk_file of "+name)
	}
	if len(retaken) > 0 {
		d.notePSKLocked()
	}
	return retaken, nil
}

// notePSKLocked shows the ids of the PSKs the running relays hold in
// status and metrics; its callers' snapshotLocked (at the end of
// switchTo, and of the drift check an unedited reload runs) publishes
// them to the cluster.
func (d *Daemon) notePSKLocked() {
	var ids []string
	for _, r := range d.relays {
		if id := PSKID(r.cfg.PSK); !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	if before := d.status.PSKIDs; len(before) > 0 && !slices.Equal(before, ids) {
		d.log.Info("the agents' PSK changed", "psk_id", strings.Join(ids, ","), "was", strings.Join(before, ","))
	}
	d.status.PSKIDs = ids
	d.met.setPSK(ids)
}

func diagText(diag *hcl.Diagnostic) string {
	text := diag.Summary
	if diag.Detail != "" {
		// HCL's own summaries ("Unsupported argument") name nothing:
		// the detail names the argument and what was meant.
		text += ": " + diag.Detail
	}
	if diag.Subject == nil {
		return text
	}
	return fmt.Sprintf("%s:%d:%d: %s", diag.Subject.Filename, diag.Subject.Start.Line, diag.Subject.Start.Column, text)
}

// checkDrift re-observes every owned host item and puts back what changed
// behind our back. An item the node no longer takes (its interface went
// away) is held, with a warning in status, while the others are still
// corrected. Switch flows are re-read by the controller on the same
// period.
func (d *Daemon) checkDrift(ctx context.Context) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.checkDriftLocked(ctx)
}

func (d *Daemon) checkDriftLocked(ctx context.Context) {
	c := &candidate{cfg: d.cfg, src: d.src, want: d.want}
	d.status.Drift.LastCheck = time.Now()
	var held []plan.Warning
	p, res, err := d.withStore(c.cfg, func(st storeHandle) (plan.Plan, Result, error) {
		p, h, res, err := ConvergeHolding(ctx, st, d.execs, c.want.Items, d.opts.Node, c.src.Hash())
		held = h
		return p, res, err
	})
	if held != nil {
		// Planned: the items held now replace those held before.
		d.noteHeld(held)
	}
	d.status.Warnings = d.withHeld(warningsOf(p))
	for _, ch := range res.Done {
		d.status.Drift.Corrections++
		d.status.Drift.ByKind[ch.Kind]++
		d.met.drift.WithLabelValues(ch.Kind).Inc()
		d.log.Warn("drift corrected", "kind", ch.Kind, "key", ch.Key, "found", ch.Before, "set", ch.After)
	}
	if res.Serial > 0 {
		d.status.Serial = res.Serial
		d.met.serial.Set(float64(res.Serial))
		d.status.LastApply = &ApplyInfo{At: time.Now(), Changes: len(res.Done), Result: "ok"}
	}
	if d.ctl != nil {
		// The controller re-reads switch flows on the same period and
		// counts what it had to repair.
		if repairs := d.ctl.ctl.Status().Counters.DriftRepairs; repairs > d.flowRepairs {
			n := repairs - d.flowRepairs
			d.status.Drift.Corrections += n
			d.status.Drift.ByKind["flows"] += n
			d.met.drift.WithLabelValues("flows").Add(float64(n))
			d.flowRepairs = repairs
		}
	}
	if err != nil {
		d.status.LastApply = &ApplyInfo{At: time.Now(), Changes: len(res.Done), Result: err.Error()}
	}
	d.driftFail.note(d.log, err, time.Now())
	d.snapshotLocked()
}

// driftFailure keeps a lasting drift check failure (a full state disk
// fails every check the same way) to one line: logged when it starts or
// changes, again each driftFailRepeat while it lasts, and once when the
// checks work again; status shows the last result throughout.
type driftFailure struct {
	msg          string
	since, shown time.Time
	checks       int
}

// driftFailRepeat is how often a lasting drift check failure is logged
// again.
const driftFailRepeat = time.Hour

func (f *driftFailure) note(log *slog.Logger, err error, now time.Time) {
	switch {
	case err == nil && f.msg != "":
		log.Info("drift check works again", "failed_since", f.since.Format(time.RFC3339), "failed_checks", f.checks)
		*f = driftFailure{}
	case err == nil:
	case err.Error() != f.msg:
		*f = driftFailure{msg: err.Error(), since: now, shown: now, checks: 1}
		log.Error("drift check failed (logged again when it changes, each hour while it lasts, and when checks work again)", "err", err)
	default:
		f.checks++
		if now.Sub(f.shown) >= driftFailRepeat {
			f.shown = now
			log.Error("drift check still fails", "err", err, "since", f.since.Format(time.RFC3339), "checks", f.checks)
		}
	}
}

// shutdown stops accepting, lets live sessions finish up to the configured
// timeout, and stops the controller. Switch flows stay in place unless the
// config asks to remove them.
// shutdownGrace is how long a stop lets the relays drain:
// daemon.shutdown_timeout.
func shutdownGrace(cfg *config.Config) time.Duration {
	if cfg == nil {
		return config.DefaultShutdownTimeout
	}
	return cfg.Daemon.ShutdownTimeout
}

// stopMargin is what a stop takes beyond the relays' drain: the
// controller's and the cluster's goodbyes.
const stopMargin = 15 * time.Second

func (d *Daemon) shutdown(cfg *config.Config) {
	d.mu.Lock()
	defer d.mu.Unlock()
	grace := shutdownGrace(cfg)
	// Resign first, so another controller takes over at once.
	if rc := d.cl; rc != nil {
		d.cl = nil
		d.clNow.Store(nil)
		rc.close()
	}
	var wg sync.WaitGroup
	for name, r := range d.relays {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sctx, cancel := context.WithTimeout(context.Background(), grace)
			defer cancel()
			if err := r.agent.Shutdown(sctx); err != nil {
				d.log.Warn("relay shutdown", "agent", name, "err", err)
			}
		}()
	}
	wg.Wait()
	d.relays = map[string]*runningRelay{}
	if d.ctl != nil {
		d.stopController(d.ctl)
		d.ctl = nil
	}
}

// controller is the running controller or nil; d.mu is held.
func (d *Daemon) controller() *sdn.Controller {
	if d.ctl == nil {
		return nil
	}
	return d.ctl.ctl
}

// Status is a snapshot for the control socket and `status`.
func (d *Daemon) Status() Status {
	d.mu.Lock()
	st := d.status
	st.Roles = append([]string(nil), st.Roles...)
	st.Warnings = append([]string(nil), st.Warnings...)
	st.Drift.ByKind = make(map[string]uint64, len(d.status.Drift.ByKind))
	for k, v := range d.status.Drift.ByKind {
		st.Drift.ByKind[k] = v
	}
	relays := make(map[string]*relay.Agent, len(d.relays))
	for k, v := range d.relays {
		relays[k] = v.agent
	}
	ctl := d.controller()
	d.mu.Unlock()
	st.Cluster = d.clusterStatus()

	names := make([]string, 0, len(relays))
	for name := range relays {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		rs := relays[name].Stats()
		healthy, why := relays[name].Health()
		st.Agents = append(st.Agents, localAgentStatus(name, healthy, why, rs))
		st.LostStreams.add(rs.Totals)
		st.Pools = append(st.Pools, poolStatuses(name, relays[name].Pools())...)
		for _, s := range rs.Sessions {
			ss := SessionStatus{
				Agent: name, Whitelist: s.Whitelist, Client: s.Client.String(), Server: s.Server.String(),
				Streams: s.Streams, ReorderDepth: s.ReorderDepth, BytesUp: s.BytesUp, BytesDown: s.BytesDown,
				Throughput: s.ThroughputUp + s.ThroughputDown, AgeSeconds: s.Age.Seconds(),
				StreamsLive: int(s.StreamsLive), StreamsLost: s.StreamsLost, StreamsReplaced: s.StreamsReplaced,
				ReinjectedBytes: s.ReinjectedBytes, StreamsChosen: s.StreamsChosen, AutoStreams: s.AutoStreams,
				WindowBytes: s.Window, CreditWaits: s.CreditWaits, PacingBps: s.PacingRate, StreamsRecovering: s.StreamsRecovering,
			}
			if s.AutoStreams {
				ss.AutoState = s.AutoState.String()
			}
			st.Sessions = append(st.Sessions, ss)
		}
	}
	if ctl != nil {
		cs := ctl.Status()
		for _, sw := range cs.Switches {
			ss := SwitchStatus{Name: sw.Name, DatapathID: sdn.DatapathIDString(sw.DatapathID), Connected: sw.Connected,
				Flows: sw.InstalledFlows, LastError: sw.LastError}
			st.Switches = append(st.Switches, ss)
		}
		for _, a := range cs.Agents {
			detail := a.Method + " " + a.Target
			if a.LastError != "" {
				detail += ": " + a.LastError
			}
			detail += fmt.Sprintf(", %d session(s)", a.Sessions)
			if a.SessionsError != "" {
				detail += " (read before; the last report was not taken: " + a.SessionsError + ")"
			}
			as := AgentStatus{Name: a.Name, Healthy: a.Healthy, Detail: detail, Sessions: a.Sessions, SessionsError: a.SessionsError}
			for _, sh := range a.Shares {
				as.Shares = append(as.Shares, ShareStatus{Switch: sh.Switch, Whitelist: sh.Whitelist, Side: string(sh.Side),
					Reverse: sh.Reverse, Buckets: sh.Buckets, Of: sh.Of})
				detail += fmt.Sprintf(", %s %s %d/%d buckets", sh.Whitelist, sh.Side, sh.Buckets, sh.Of)
			}
			as.Detail = detail
			st.Agents = append(st.Agents, as)
		}
	}
	return st
}

func (d *Daemon) statusLine() string {
	st := d.Status()
	return fmt.Sprintf("serial %d, %d session(s), config %.12s", st.Serial, len(st.Sessions), st.ConfigHash)
}

// liveStats feeds the metrics from the same sources as Status.
func (d *Daemon) liveStats() liveStats {
	d.mu.Lock()
	relays := make([]*relay.Agent, 0, len(d.relays))
	names := make([]string, 0, len(d.relays))
	for name, r := range d.relays {
		relays = append(relays, r.agent)
		names = append(names, name)
	}
	ctl := d.controller()
	d.mu.Unlock()
	var ls liveStats
	ls.FrameMemory = relay.FrameMemory()
	ls.MetricsClosed = relay.HTTPClosedOf(&d.met.closed)
	for i, r := range relays {
		ls.Pools = append(ls.Pools, poolStatuses(names[i], r.Pools())...)
		rs := r.Stats()
		healthy, why := r.Health()
		ls.Local = append(ls.Local, localAgentStatus(names[i], healthy, why, rs))
		ls.Sessions += rs.Totals.SessionsActive
		ls.BytesUp += rs.Totals.BytesUp
		ls.BytesDown += rs.Totals.BytesDown
		ls.Aborts += rs.Totals.SessionsAborted
		ls.Fallbacks += rs.Totals.Fallbacks
		ls.HandshakeFailures += rs.Totals.HandshakeFailures
		ls.HandshakesAbandoned += rs.Totals.HandshakesAbandoned
		ls.LostStreams.add(rs.Totals)
		ls.MemoryReserved += rs.Totals.MemoryReserved
		ls.MemoryLimit += rs.Totals.MemoryLimit
		for k, v := range rs.Totals.Rejected {
			if ls.Refusals == nil {
				ls.Refusals = map[string]uint64{}
			}
			ls.Refusals[k] += v
		}
		for _, s := range rs.Sessions {
			ls.Throughput += s.ThroughputUp + s.ThroughputDown
			ls.ReorderDepth = max(ls.ReorderDepth, s.ReorderDepth)
			ls.Stalls += s.Stalls
			if s.AutoStreams {
				ls.AutoStreams = ls.AutoStreams.add(names[i], s.Whitelist, s.StreamsChosen)
			}
		}
	}
	if ctl != nil {
		cs := ctl.Status()
		ls.FlowMods = cs.Counters.FlowModsSent
		ls.Switches = len(cs.Switches)
		for _, sw := range cs.Switches {
			if sw.Connected {
				ls.Connected++
			}
		}
		for _, a := range cs.Agents {
			if a.Checked && !a.Healthy {
				ls.AgentsDown++
			}
			as := agentStat{Name: a.Name, Up: a.Healthy, Sessions: a.Sessions}
			for _, sh := range a.Shares {
				side := string(sh.Side)
				if sh.Reverse {
					side += "-reverse"
				}
				as.Shares = append(as.Shares, agentShare{Whitelist: sh.Whitelist, Side: side, Buckets: sh.Buckets, Of: sh.Of})
			}
			ls.Agents = append(ls.Agents, as)
		}
	}
	return ls
}

type storeHandle = *store.Store

// withStore opens the state database for one convergence and closes it
// again, so the CLI can read it between runs. A CLI holding it briefly only
// delays the daemon by the lock timeout.
func (d *Daemon) withStore(cfg *config.Config, fn func(storeHandle) (plan.Plan, Result, error)) (plan.Plan, Result, error) {
	st, err := d.openState(cfg)
	if err != nil {
		return plan.Plan{}, Result{}, err
	}
	defer st.Close()
	return fn(st)
}

// openState opens the state database for one convergence. The daemon's
// first open may create it; every later one must find the database that
// one opened. A database removed or replaced under a running daemon
// would otherwise be an empty one, and the next change would record the
// appliance's own values as the host's originals: so the convergence
// fails instead, each time, until the file is put back or the daemon is
// restarted, which starts a new record knowingly.
func (d *Daemon) openState(cfg *config.Config) (*store.Store, error) {
	path := d.statePath(cfg)
	first := d.stateFile.Load()
	st, err := store.Open(path, store.Options{LockTimeout: 5 * time.Second, MustExist: first != nil})
	if errors.Is(err, store.ErrNoDatabase) {
		return nil, fmt.Errorf("open state: the state database %s went away while this daemon ran; put it back, or restart "+
			"sosappliance to begin a new one (the values it recorded before the appliance changed the host, which rollback restores, are lost with it)", path)
	}
	if err != nil {
		return nil, fmt.Errorf("open state: %w", err)
	}
	now := stateFile{lineage: st.Lineage()}
	if fi, err := os.Stat(path); err == nil {
		now.file = fi
	}
	switch {
	case first == nil:
		d.stateFile.Store(&now)
	case first.lineage != now.lineage:
		st.Close()
		return nil, fmt.Errorf("open state: the state database %s was replaced while this daemon ran (lineage %s, now %s); put the "+
			"first back, or restart sosappliance to go on with this one", path, first.lineage, now.lineage)
	case first.file != nil && now.file != nil && !os.SameFile(first.file, now.file):
		// A copy (a restored backup) has the lineage, not the daemon's
		// lock, which is on the file it started with: a rollback would
		// find no daemon on it.
		st.Close()
		return nil, fmt.Errorf("open state: the state database %s is another file than the one this daemon started with "+
			"(a copy put in its place?); restart sosappliance to go on with it", path)
	}
	return st, nil
}

// stateFile is the state database a daemon opened first: its lineage and
// the file itself.
type stateFile struct {
	lineage string
	file    os.FileInfo
}

// planFlows diffs the given switches against the live flow tables of the
// switches connected to this node's controller.
func (d *Daemon) planFlows(ctx context.Context, switches []flows.Switch) []FlowPlan {
	d.mu.Lock()
	ctl := d.controller()
	d.mu.Unlock()
	out := make([]FlowPlan, 0, len(switches))
	for _, sw := range switches {
		fp := FlowPlan{Switch: sw.Name}
		if ctl == nil {
			fp.Error = "this daemon runs no controller"
			out = append(out, fp)
			continue
		}
		changes, connected, err := ctl.PlanSwitch(ctx, sw)
		fp = switchPlan(sw, changes)
		fp.Connected = connected
		if err != nil {
			fp.Error = err.Error()
		}
		out = append(out, fp)
	}
	return out
}

// FoundedFile is where agent records the sessions it founds (see
// relay's founded.go): next to the state store, one file per agent, named
// after it (characters other than letters, digits, '-' and '_' replaced,
// and then a hash of the name added, so two names never share a file).
// No name keeps a '.': the relay's own <file>.old and <file>.new are
// never another agent's file.
func FoundedFile(statePath, agent string) string {
	safe := []byte(agent)
	changed := false
	for i, c := range safe {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			safe[i], changed = '_', true
		}
	}
	name := "founded-" + string(safe)
	if changed {
		sum := sha256.Sum256([]byte(agent))
		name += "-" + hex.EncodeToString(sum[:4])
	}
	return filepath.Join(filepath.Dir(statePath), name)
}
