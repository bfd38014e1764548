package appliance

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/sosappliance/sosappliance/appliance/config"
	"github.com/sosappliance/sosappliance/appliance/desired"
	"github.com/sosappliance/sosappliance/appliance/plan"
	"github.com/sosappliance/sosappliance/appliance/store"
	"github.com/sosappliance/sosappliance/dataplane/relay"
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
	mu         sync.Mutex
	cfg        *config.Config
	src        config.Source
	want       *desired.Desired
	psk        []byte
	relays     map[string]*relay.Agent
	ctl        *sdn.Controller
	ctlStop    context.CancelFunc
	ctlDone    chan error
	status     Status
	driftEvery time.Duration
	// flowRepairs is the controller's drift repair count already counted.
	flowRepairs uint64

	// beat is the unix time the main loop last turned, for the watchdog.
	beat atomic.Int64
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
		relays: map[string]*relay.Agent{},
	}
	d.note = notifier{log: d.log}
	d.met = newMetrics(d.liveStats)
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

// candidate is a decoded, validated and compiled config not yet running.
type candidate struct {
	cfg  *config.Config
	src  config.Source
	want *desired.Desired
	psk  []byte
}

func (d *Daemon) load() (*candidate, error) {
	cfg, src, diags := config.LoadFile(d.opts.ConfigPath)
	if diags.HasErrors() {
		return nil, &ConfigError{Diagnostics: diags, Source: src}
	}
	want, err := desired.Compile(cfg, d.opts.Node)
	if err != nil {
		return nil, err
	}
	c := &candidate{cfg: cfg, src: src, want: want}
	if len(want.Agents) > 0 {
		if c.psk, err = LoadPSK(cfg.Security.PSKFile); err != nil {
			return nil, err
		}
	}
	return c, nil
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
	d.driftEvery = c.cfg.Daemon.DriftInterval
	if d.opts.DriftInterval > 0 {
		d.driftEvery = d.opts.DriftInterval
	}
	d.status.Drift.Interval = d.driftEvery.String()
	d.log.Info("starting", "roles", c.want.Roles, "config", c.src.Filename, "sha256", c.src.Hash()[:12])

	ctl, err := ListenControl(d.controlPath(c.cfg), d.Status, WithFlowPlanner(d.planFlows))
	if err != nil {
		return err
	}
	defer ctl.Close()
	metricsAddr := c.cfg.Daemon.MetricsListen
	if d.opts.MetricsListen != nil {
		metricsAddr = *d.opts.MetricsListen
	}
	stopMetrics, err := d.met.serve(ctx, metricsAddr)
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

	d.mu.Lock()
	err = d.start(ctx, c)
	d.mu.Unlock()
	if err != nil {
		d.shutdown(c.cfg)
		return err
	}
	d.met.reloads.WithLabelValues("ok")
	d.note.ready(d.statusLine())
	d.log.Info("ready", "serial", d.Status().Serial)

	go d.note.watchdog(ctx, func() bool {
		// The loop turns at least every drift interval; allow three.
		return time.Since(time.Unix(d.beat.Load(), 0)) < 3*d.driftEvery+10*time.Second
	})
	drift := time.NewTicker(d.driftEvery)
	defer drift.Stop()
	for {
		d.beat.Store(time.Now().Unix())
		select {
		case <-ctx.Done():
			d.note.stopping()
			d.log.Info("stopping")
			d.mu.Lock()
			cfg := d.cfg
			d.mu.Unlock()
			d.shutdown(cfg)
			return nil
		case <-hup:
			d.log.Info("reload requested by SIGHUP")
			d.reload(ctx)
		case <-watcher.C:
			d.log.Info("config file changed")
			d.reload(ctx)
		case <-drift.C:
			d.checkDrift(ctx)
		}
	}
}

// start brings up a config for the first time, in the order of the design:
// store and host items (tuning, then steering), relays, controller.
func (d *Daemon) start(ctx context.Context, c *candidate) error {
	if err := d.convergeHost(ctx, c); err != nil {
		// Host items are retried at every drift check; a relay without
		// its steering still serves nothing wrong.
		d.log.Error("host convergence failed; will retry", "err", err)
	}
	if err := d.syncRelays(ctx, c); err != nil {
		return err
	}
	if err := d.syncController(ctx, c); err != nil {
		return err
	}
	d.cfg, d.src, d.want, d.psk = c.cfg, c.src, c.want, c.psk
	d.status.Roles = c.want.Roles
	d.status.ConfigHash = c.src.Hash()
	d.met.setConfig(d.status.ConfigHash)
	return nil
}

// convergeHost plans and applies the node's host items. The store is open
// only for the length of it, so `plan`, `apply` and `status` work while the
// daemon runs.
func (d *Daemon) convergeHost(ctx context.Context, c *candidate) error {
	p, res, err := d.withStore(c.cfg, func(st storeHandle) (plan.Plan, Result, error) {
		return Converge(ctx, st, d.execs, c.want.Items, d.opts.Node, c.src.Hash())
	})
	info := &ApplyInfo{At: time.Now(), Changes: len(res.Done), Result: "ok"}
	if err != nil {
		info.Result = err.Error()
		d.met.applies.WithLabelValues("failed").Inc()
	} else {
		d.met.applies.WithLabelValues("ok").Inc()
	}
	d.status.LastApply = info
	d.status.Warnings = warningsOf(p)
	if res.Serial > 0 {
		d.status.Serial = res.Serial
		d.met.serial.Set(float64(res.Serial))
	} else if err == nil {
		d.status.Serial = p.Serial
		d.met.serial.Set(float64(p.Serial))
	}
	for _, ch := range res.Done {
		d.log.Info("applied", "action", string(ch.Action), "kind", ch.Kind, "key", ch.Key, "after", ch.After)
	}
	return err
}

func warningsOf(p plan.Plan) []string {
	var out []string
	for _, w := range p.Warnings {
		out = append(out, fmt.Sprintf("%s %s: %s", w.Kind, w.Key, w.Message))
	}
	return out
}

// relayConfig translates one desired agent into the relay's own config.
func relayConfig(cfg *config.Config, a *desired.Agent, psk []byte) (relay.Config, error) {
	rc := relay.Config{
		Name:              a.Name,
		TransparentListen: netip.AddrPortFrom(netip.IPv4Unspecified(), a.RelayPort),
		DataListen:        a.DataListen,
		PSK:               psk,
		Encryption:        cfg.Security.Encryption,
		Limits: relay.Limits{
			MaxSessions:    cfg.Limits.MaxSessions,
			MaxStreams:     cfg.Limits.MaxStreams,
			SessionMemory:  cfg.Limits.SessionMemory,
			MaxPreAuth:     cfg.Limits.PreauthConnections,
			PreAuthTimeout: cfg.Limits.PreauthTimeout,
			StallTimeout:   cfg.Limits.StallTimeout,
			HalfClosedIdle: cfg.Limits.IdleTimeout,

			Memory:               cfg.Limits.Memory,
			MaxPreAuthPerSource:  cfg.Limits.PreauthPerSource,
			MaxHalfOpenPerSource: cfg.Limits.HalfOpenPerSource,
		},
		SocketBuffer: int(a.SocketBuffer),
		Congestion:   a.CongestionControl,
		RelayCPUs:    a.RelayCPUs,
	}
	if a.HealthListen != "" {
		hp, err := netip.ParseAddrPort(a.HealthListen)
		if err != nil {
			return rc, fmt.Errorf("agent %s health_listen: %w", a.Name, err)
		}
		rc.HealthListen = hp
	}
	route := func(r desired.Route, peer netip.AddrPort) relay.Whitelist {
		return relay.Whitelist{
			Name: r.Whitelist, Clients: r.Clients, Server: r.Server, Port: r.Port,
			Streams: r.Streams, ChunkSize: r.ChunkSize, QueueLength: r.QueueLength,
			Peer: peer, PeerName: r.PeerName,
		}
	}
	for _, r := range a.Client {
		rc.Client = append(rc.Client, route(r, r.Peer))
	}
	for _, r := range a.Server {
		rc.Server = append(rc.Server, route(r, netip.AddrPort{}))
	}
	return rc, rc.Validate()
}

// syncRelays starts the relays of new agents and updates running ones in
// place (live sessions survive); relays of agents no longer on this node are
// shut down after every new config took.
func (d *Daemon) syncRelays(ctx context.Context, c *candidate) error {
	configs := map[string]relay.Config{}
	for _, a := range c.want.Agents {
		rc, err := relayConfig(c.cfg, a, c.psk)
		if err != nil {
			return err
		}
		configs[a.Name] = rc
	}
	for name, rc := range configs {
		if r, ok := d.relays[name]; ok {
			if err := r.Update(rc); err != nil {
				return fmt.Errorf("relay %s: %w", name, err)
			}
			continue
		}
		r, err := relay.New(rc, d.log.With("agent", name))
		if err != nil {
			return fmt.Errorf("relay %s: %w", name, err)
		}
		if err := r.Start(context.WithoutCancel(ctx)); err != nil {
			return fmt.Errorf("relay %s: %w", name, err)
		}
		d.relays[name] = r
		d.log.Info("relay started", "agent", name)
	}
	for name, r := range d.relays {
		if _, keep := configs[name]; keep {
			continue
		}
		d.stopRelay(name, r, c.cfg.Daemon.ShutdownTimeout)
	}
	return nil
}

func (d *Daemon) stopRelay(name string, r *relay.Agent, grace time.Duration) {
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := r.Shutdown(sctx); err != nil {
		d.log.Warn("relay shutdown", "agent", name, "err", err)
	}
	delete(d.relays, name)
	d.log.Info("relay stopped", "agent", name)
}

// healthTimeout bounds one agent probe. Probes to the far site cross the
// WAN, where a full drop-tail queue or a lost SYN (retried after 1 s, then
// 3 s) can delay an answer well past a short check interval; withdrawing
// steering over that would break every accelerated connection in flight.
const healthTimeout = 5 * time.Second

// healthFall is how many failed probes in a row mark an agent down.
const healthFall = 3

func controllerConfig(ctl *desired.Controller, drift time.Duration) (sdn.Config, error) {
	var serverTLS *tls.Config
	if f := ctl.TLS; f != nil {
		var err error
		if serverTLS, err = sdn.LoadTLS(f.CertFile, f.KeyFile, f.CAFile); err != nil {
			return sdn.Config{}, fmt.Errorf("tls: %w", err)
		}
	}
	return sdn.Config{
		Listen:            ctl.Listen,
		TLS:               serverTLS,
		Keepalive:         ctl.Keepalive,
		HealthInterval:    ctl.HealthInterval,
		HealthTimeout:     max(ctl.HealthInterval, healthTimeout),
		HealthFall:        healthFall,
		ResyncInterval:    drift,
		RemoveFlowsOnStop: ctl.RemoveFlowsOnStop,
		Switches:          ctl.Switches,
		Agents:            agentHealth(ctl),
	}, nil
}

func agentHealth(ctl *desired.Controller) map[string]sdn.AgentHealth {
	out := map[string]sdn.AgentHealth{}
	for name, h := range ctl.Health {
		out[name] = sdn.AgentHealth{HTTP: h.HTTP, Data: h.Data.String()}
	}
	return out
}

// syncController starts, updates or stops the OpenFlow controller. A change
// of listen address or timers restarts it; flows on the switches stay
// (fail_mode=secure) and the restarted controller finds them in place.
func (d *Daemon) syncController(ctx context.Context, c *candidate) error {
	want := c.want.Controller
	if want == nil {
		d.stopController()
		return nil
	}
	for i := range want.Switches {
		want.Switches[i].Connect = want.Connect[want.Switches[i].Name]
	}
	if d.ctl != nil && d.cfg != nil && d.cfg.Controller != nil && sameControllerSettings(d.cfg.Controller, c.cfg.Controller) {
		return d.ctl.Update(want.Switches, agentHealth(want))
	}
	cfg, err := controllerConfig(want, d.driftEvery)
	if err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	d.stopController()
	ctl, err := sdn.New(cfg, d.log.With("role", "controller"))
	if err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- ctl.Run(runCtx) }()
	// Fail fast on a listen address in use rather than running blind.
	select {
	case err := <-done:
		cancel()
		return fmt.Errorf("controller: %w", err)
	case <-time.After(200 * time.Millisecond):
	}
	d.ctl, d.ctlStop, d.ctlDone = ctl, cancel, done
	d.flowRepairs = 0
	d.log.Info("controller started", "listen", want.Listen, "switches", len(want.Switches))
	return nil
}

func sameControllerSettings(a, b *config.Controller) bool {
	sameTLS := (a.TLS == nil) == (b.TLS == nil)
	if sameTLS && a.TLS != nil {
		sameTLS = a.TLS.CertFile == b.TLS.CertFile && a.TLS.KeyFile == b.TLS.KeyFile && a.TLS.CAFile == b.TLS.CAFile
	}
	return a.Listen == b.Listen && a.Keepalive == b.Keepalive && a.HealthInterval == b.HealthInterval &&
		a.RemoveFlowsOnStop == b.RemoveFlowsOnStop && sameTLS
}

func (d *Daemon) stopController() {
	if d.ctl == nil {
		return
	}
	d.ctlStop()
	if err := <-d.ctlDone; err != nil && !errors.Is(err, context.Canceled) {
		d.log.Warn("controller stopped", "err", err)
	}
	d.ctl, d.ctlStop, d.ctlDone = nil, nil, nil
}

// reload follows Caddy's order: decode, validate, compile, apply the
// difference, swap. When any step fails, the last good config keeps running
// and the failure shows in the log, status and metrics.
func (d *Daemon) reload(ctx context.Context) {
	d.note.reloading()
	defer func() { d.note.ready(d.statusLine()) }()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.status.Reloads++
	c, err := d.load()
	if err == nil && c.src.Hash() == d.src.Hash() {
		// SIGHUP without an edit: converge again, as a drift check.
		d.met.reloads.WithLabelValues("ok").Inc()
		d.status.LastReload = &ReloadInfo{At: time.Now(), Hash: c.src.Hash(), Result: "unchanged"}
		d.checkDriftLocked(ctx)
		return
	}
	if err == nil {
		err = d.apply(ctx, c)
	}
	if err != nil {
		d.status.ReloadFails++
		d.met.reloads.WithLabelValues("failed").Inc()
		d.status.LastReload = &ReloadInfo{At: time.Now(), Result: "failed, still running the last good config: " + err.Error()}
		var ce *ConfigError
		if errors.As(err, &ce) {
			d.status.LastReload.Hash = ce.Source.Hash()
			for _, diag := range ce.Diagnostics {
				d.log.Error("reload refused", "problem", diagText(diag))
			}
			return
		}
		d.log.Error("reload failed; the last good config keeps running", "err", err)
		return
	}
	d.met.reloads.WithLabelValues("ok").Inc()
	d.status.LastReload = &ReloadInfo{At: time.Now(), Hash: c.src.Hash(), Result: "ok"}
	d.log.Info("reloaded", "sha256", c.src.Hash()[:12], "serial", d.status.Serial)
}

func diagText(diag *hcl.Diagnostic) string {
	if diag.Subject == nil {
		return diag.Summary
	}
	return fmt.Sprintf("%s:%d:%d: %s", diag.Subject.Filename, diag.Subject.Start.Line, diag.Subject.Start.Column, diag.Summary)
}

// apply moves from the running config to c. If the host or a relay refuses
// the new state, the old one is put back before returning the error.
func (d *Daemon) apply(ctx context.Context, c *candidate) error {
	old := &candidate{cfg: d.cfg, src: d.src, want: d.want, psk: d.psk}
	if err := d.convergeHost(ctx, c); err != nil {
		d.restore(ctx, old)
		return fmt.Errorf("apply host state: %w", err)
	}
	if err := d.syncRelays(ctx, c); err != nil {
		d.restore(ctx, old)
		return err
	}
	if err := d.syncController(ctx, c); err != nil {
		d.restore(ctx, old)
		return err
	}
	d.cfg, d.src, d.want, d.psk = c.cfg, c.src, c.want, c.psk
	d.status.Roles = c.want.Roles
	d.status.ConfigHash = c.src.Hash()
	d.met.setConfig(d.status.ConfigHash)
	return nil
}

func (d *Daemon) restore(ctx context.Context, old *candidate) {
	if err := d.convergeHost(ctx, old); err != nil {
		d.log.Error("putting back the last good host state failed", "err", err)
	}
	if err := d.syncRelays(ctx, old); err != nil {
		d.log.Error("putting back the last good relays failed", "err", err)
	}
	if err := d.syncController(ctx, old); err != nil {
		d.log.Error("putting back the last good controller failed", "err", err)
	}
}

// checkDrift re-observes every owned host item and puts back what changed
// behind our back. Switch flows are re-read by the controller on the same
// period.
func (d *Daemon) checkDrift(ctx context.Context) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.checkDriftLocked(ctx)
}

func (d *Daemon) checkDriftLocked(ctx context.Context) {
	c := &candidate{cfg: d.cfg, src: d.src, want: d.want}
	d.status.Drift.LastCheck = time.Now()
	p, res, err := d.withStore(c.cfg, func(st storeHandle) (plan.Plan, Result, error) {
		return Converge(ctx, st, d.execs, c.want.Items, d.opts.Node, c.src.Hash())
	})
	d.status.Warnings = warningsOf(p)
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
		if repairs := d.ctl.Status().Counters.DriftRepairs; repairs > d.flowRepairs {
			n := repairs - d.flowRepairs
			d.status.Drift.Corrections += n
			d.status.Drift.ByKind["flows"] += n
			d.met.drift.WithLabelValues("flows").Add(float64(n))
			d.flowRepairs = repairs
		}
	}
	if err != nil {
		d.status.LastApply = &ApplyInfo{At: time.Now(), Changes: len(res.Done), Result: err.Error()}
		d.log.Error("drift check failed", "err", err)
	}
}

// shutdown stops accepting, lets live sessions finish up to the configured
// timeout, and stops the controller. Switch flows stay in place unless the
// config asks to remove them.
func (d *Daemon) shutdown(cfg *config.Config) {
	d.mu.Lock()
	defer d.mu.Unlock()
	grace := 30 * time.Second
	if cfg != nil {
		grace = cfg.Daemon.ShutdownTimeout
	}
	var wg sync.WaitGroup
	for name, r := range d.relays {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sctx, cancel := context.WithTimeout(context.Background(), grace)
			defer cancel()
			if err := r.Shutdown(sctx); err != nil {
				d.log.Warn("relay shutdown", "agent", name, "err", err)
			}
		}()
	}
	wg.Wait()
	d.relays = map[string]*relay.Agent{}
	d.stopController()
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
		relays[k] = v
	}
	ctl := d.ctl
	d.mu.Unlock()

	names := make([]string, 0, len(relays))
	for name := range relays {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		rs := relays[name].Stats()
		st.Agents = append(st.Agents, AgentStatus{Name: name, Healthy: true, Local: true,
			Detail: fmt.Sprintf("%d session(s), %d stream(s)", rs.Totals.SessionsActive, rs.Totals.StreamsActive)})
		for _, s := range rs.Sessions {
			st.Sessions = append(st.Sessions, SessionStatus{
				Agent: name, Whitelist: s.Whitelist, Client: s.Client.String(), Server: s.Server.String(),
				Streams: s.Streams, ReorderDepth: s.ReorderDepth, BytesUp: s.BytesUp, BytesDown: s.BytesDown,
				Throughput: s.ThroughputUp + s.ThroughputDown, AgeSeconds: s.Age.Seconds(),
			})
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
			st.Agents = append(st.Agents, AgentStatus{Name: a.Name, Healthy: a.Healthy, Detail: detail})
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
	for _, r := range d.relays {
		relays = append(relays, r)
	}
	ctl := d.ctl
	d.mu.Unlock()
	var ls liveStats
	for _, r := range relays {
		rs := r.Stats()
		ls.Sessions += rs.Totals.SessionsActive
		ls.BytesUp += rs.Totals.BytesUp
		ls.BytesDown += rs.Totals.BytesDown
		ls.Aborts += rs.Totals.SessionsAborted
		ls.Fallbacks += rs.Totals.Fallbacks
		ls.HandshakeFailures += rs.Totals.HandshakeFailures
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
		}
	}
	return ls
}

type storeHandle = *store.Store

// withStore opens the state database for one convergence and closes it
// again, so the CLI can read it between runs. A CLI holding it briefly only
// delays the daemon by the lock timeout.
func (d *Daemon) withStore(cfg *config.Config, fn func(storeHandle) (plan.Plan, Result, error)) (plan.Plan, Result, error) {
	st, err := store.Open(d.statePath(cfg), store.Options{LockTimeout: 5 * time.Second})
	if err != nil {
		return plan.Plan{}, Result{}, fmt.Errorf("open state: %w", err)
	}
	defer st.Close()
	return fn(st)
}

// planFlows diffs the given switches against the live flow tables of the
// switches connected to this node's controller.
func (d *Daemon) planFlows(ctx context.Context, switches []flows.Switch) []FlowPlan {
	d.mu.Lock()
	ctl := d.ctl
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
