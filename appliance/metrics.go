package appliance

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sosappliance/sosappliance/dataplane/relay"
	"github.com/sosappliance/sosappliance/internal/connlimit"
)

// liveStats is read from the relays and the controller at scrape time, so
// the metrics never disagree with `status`.
type liveStats struct {
	Sessions     int
	BytesUp      uint64
	BytesDown    uint64
	Throughput   float64
	ReorderDepth int
	Stalls       uint64
	Aborts       uint64
	FlowMods     uint64
	Switches     int
	Connected    int
	AgentsDown   int
	// Agents are the controller's view of each agent (controller node
	// only): health, reported sessions and bucket shares.
	Agents []agentStat
	// Local are this node's own agents with their lifetime counters.
	Local []AgentStatus
	// Of the agents' stripe data ports and client sides.
	Fallbacks         uint64
	HandshakeFailures uint64
	// HandshakesAbandoned are peers that hung up after a valid hello,
	// kept apart from the failures (see relay.Totals).
	HandshakesAbandoned uint64
	Refusals            map[string]uint64
	MemoryReserved      int64
	MemoryLimit         int64
	// FrameMemory is the process's frame buffers (all its agents).
	FrameMemory relay.FrameMemoryStats
	LostStreams LostStreams
	Pools       []PoolStatus
	// AutoStreams are the stream counts live sessions of streams = "auto"
	// whitelists chose, per agent and whitelist.
	AutoStreams autoStreamStats
	// MetricsClosed is what the /metrics server closed unserved.
	MetricsClosed relay.HTTPClosed
}

// autoStreamStat is the stream counts chosen by the live sessions of one
// streams = "auto" whitelist at one agent: how many sessions, the fewest
// and the most streams.
type autoStreamStat struct {
	Agent, Whitelist string
	Sessions         int
	Min, Max         int
}

type autoStreamStats []autoStreamStat

func (l autoStreamStats) add(agent, whitelist string, chosen int) autoStreamStats {
	for i := range l {
		if l[i].Agent == agent && l[i].Whitelist == whitelist {
			l[i].Sessions++
			l[i].Min, l[i].Max = min(l[i].Min, chosen), max(l[i].Max, chosen)
			return l
		}
	}
	return append(l, autoStreamStat{Agent: agent, Whitelist: whitelist, Sessions: 1, Min: chosen, Max: chosen})
}

// agentStat is one agent as the controller sees it.
type agentStat struct {
	Name     string
	Up       bool
	Sessions int
	Shares   []agentShare
}

// agentShare is an agent's buckets of one spread whitelist at one side.
type agentShare struct {
	Whitelist, Side string
	Buckets, Of     int
}

type metrics struct {
	reg        *prometheus.Registry
	reloads    *prometheus.CounterVec
	applies    *prometheus.CounterVec
	drift      *prometheus.CounterVec
	configInfo *prometheus.GaugeVec
	pskInfo    *prometheus.GaugeVec
	serial     prometheus.Gauge
	limits     httpLimits // of the /metrics server; tests shorten them

	// closed counts what the /metrics server's listener closed unserved.
	closed connlimit.Counts
	mu     sync.Mutex
	ln     *connlimit.Listener // nil until it serves
	allow  []netip.Prefix      // daemon.metrics_allow; empty: any source
	users  []uint32            // daemon.metrics_allow_users, as uids
}

func newMetrics(live func() liveStats) *metrics {
	m := &metrics{
		reg:    prometheus.NewRegistry(),
		limits: metricsLimits,
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sosappliance_reloads_total", Help: "Config reloads by result (ok, failed).",
		}, []string{"result"}),
		applies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sosappliance_applies_total", Help: "Convergence runs by result.",
		}, []string{"result"}),
		drift: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sosappliance_drift_corrections_total", Help: "Owned items found changed behind our back and put back, by kind.",
		}, []string{"kind"}),
		configInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sosappliance_config_info", Help: "The running config; value 1, hash in the label.",
		}, []string{"sha256"}),
		pskInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sosappliance_psk_info", Help: "The PSK the local agents hold; value 1, its id (status says psk id) in the label. Absent on a node without agents.",
		}, []string{"psk_id"}),
		serial: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sosappliance_state_serial", Help: "State serial of the last apply.",
		}),
	}
	m.reg.MustRegister(m.reloads, m.applies, m.drift, m.configInfo, m.pskInfo, m.serial,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&liveCollector{live: live})
	// Series exist from the start, so a dashboard shows zero rather than
	// nothing.
	for _, result := range []string{"ok", "failed"} {
		m.reloads.WithLabelValues(result)
		m.applies.WithLabelValues(result)
	}
	for _, kind := range []string{"sysctl", "interface", "irq", "relay", "steering", "flows"} {
		m.drift.WithLabelValues(kind)
	}
	return m
}

// setPSK shows the ids of the PSKs the local agents hold (none: no
// series).
func (m *metrics) setPSK(ids []string) {
	m.pskInfo.Reset()
	for _, id := range ids {
		m.pskInfo.WithLabelValues(id).Set(1)
	}
}

func (m *metrics) setConfig(hash string) {
	m.configInfo.Reset()
	m.configInfo.WithLabelValues(hash).Set(1)
}

var (
	descSessions    = prometheus.NewDesc("sosappliance_sessions", "Live accelerated sessions.", nil, nil)
	descBytes       = prometheus.NewDesc("sosappliance_session_bytes_total", "Bytes relayed by live and finished sessions, by direction.", []string{"direction"}, nil)
	descThroughput  = prometheus.NewDesc("sosappliance_throughput_bits_per_second", "Sum of the live sessions' recent throughput.", nil, nil)
	descReorder     = prometheus.NewDesc("sosappliance_reorder_depth_chunks", "Largest reorder window occupancy among live sessions.", nil, nil)
	descStalls      = prometheus.NewDesc("sosappliance_stream_stalls_total", "Stripe streams that stalled past their timeout.", nil, nil)
	descAborts      = prometheus.NewDesc("sosappliance_session_aborts_total", "Sessions aborted.", nil, nil)
	descFlowMods    = prometheus.NewDesc("sosappliance_flow_mods_total", "OpenFlow flow mods sent to switches.", nil, nil)
	descSwitches    = prometheus.NewDesc("sosappliance_switches", "Declared switches, by connection state.", []string{"state"}, nil)
	descAgentsDown  = prometheus.NewDesc("sosappliance_agents_down", "Agents the controller sees as unhealthy (their steering is withdrawn).", nil, nil)
	descFallbacks   = prometheus.NewDesc("sosappliance_fallbacks_total", "Steered connections carried direct, unaccelerated, because their stripes could not be opened.", nil, nil)
	descRefusals    = prometheus.NewDesc("sosappliance_refusals_total", "Connections and streams refused or evicted by an agent, by reason.", []string{"reason"}, nil)
	descHSFailures  = prometheus.NewDesc("sosappliance_handshake_failures_total", "Stream handshakes that failed authentication or broke off.", nil, nil)
	descHSAbandoned = prometheus.NewDesc("sosappliance_handshakes_abandoned_total", "Stream handshakes the peer hung up on after a valid hello (an agent giving up a stream, or a replay); not counted as failures.", nil, nil)
	descAgentUp     = prometheus.NewDesc("sosappliance_agent_up", "1 while the controller sees the agent healthy.", []string{"agent"}, nil)
	descAgentSess   = prometheus.NewDesc("sosappliance_agent_sessions", "Live sessions the agent last reported to the controller.", []string{"agent"}, nil)
	descAgentShare  = prometheus.NewDesc("sosappliance_agent_share_ratio", "The agent's part of a spread whitelist's buckets at one side, after fail-over.", []string{"agent", "whitelist", "side"}, nil)
	descMemory      = prometheus.NewDesc("sosappliance_session_memory_bytes", "Session memory the agents reserved, and their cap.", []string{"kind"}, nil)
	descFrameMem    = prometheus.NewDesc("sosappliance_frame_buffer_bytes", "The process's frame buffers: held by sessions (or dropped by them and not yet collected), free, and free with their pages handed back to the kernel.", []string{"state"}, nil)
	descLost        = prometheus.NewDesc("sosappliance_streams_lost_total", "Stripe streams lost (reset, failed or stalled) in live sessions.", nil, nil)
	descReplaced    = prometheus.NewDesc("sosappliance_streams_replaced_total", "Lost stripe streams replaced by an authenticated join.", nil, nil)
	descReinjected  = prometheus.NewDesc("sosappliance_reinjected_bytes_total", "Payload bytes sent again on surviving streams after their stream was lost.", nil, nil)
	descDuplicates  = prometheus.NewDesc("sosappliance_duplicate_frames_total", "Authenticated duplicate frames dropped by a receiver.", nil, nil)
	descHeadOfLine  = prometheus.NewDesc("sosappliance_head_of_line_reinjected_bytes_total", "Payload bytes sent again on a healthy stream while the stream carrying them was in loss recovery and delivery waited for them.", nil, nil)
	poolLabels      = []string{"agent", "peer"}
	descAutoStreams = prometheus.NewDesc("sosappliance_auto_streams", `Streams chosen by the live sessions of a streams = "auto" whitelist: the fewest and the most (stat min, max).`, []string{"agent", "whitelist", "stat"}, nil)
	descPoolIdle    = prometheus.NewDesc("sosappliance_pool_idle_streams", "Idle authenticated streams in a client-side agent's warm pool toward a far agent.", poolLabels, nil)
	descPoolClaims  = prometheus.NewDesc("sosappliance_pool_claims_total", "Pooled streams bound to new sessions.", poolLabels, nil)
	descPoolMisses  = prometheus.NewDesc("sosappliance_pool_misses_total", "Streams new sessions wanted from the pool and did not find (opened as before).", poolLabels, nil)
	descPoolRefill  = prometheus.NewDesc("sosappliance_pool_refills_total", "Streams opened into the pool.", poolLabels, nil)
	descMetricsShut = prometheus.NewDesc("sosappliance_metrics_connections_closed_total", "Connections the /metrics server closed unserved, by reason: denied (outside daemon.metrics_allow), evicted (past its connection caps), refused (new, while every other was being served).", []string{"reason"}, nil)
	descPoolDied    = prometheus.NewDesc("sosappliance_pool_died_total", "Pooled streams found dead while idle or at bind time.", poolLabels, nil)
)

type liveCollector struct{ live func() liveStats }

func (c *liveCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSessions, descBytes, descThroughput, descReorder, descStalls, descAborts, descFlowMods, descSwitches, descAgentsDown,
		descFallbacks, descRefusals, descHSFailures, descHSAbandoned, descMemory, descFrameMem, descLost, descReplaced, descReinjected, descDuplicates, descHeadOfLine,
		descAgentUp, descAgentSess, descAgentShare,
		descPoolIdle, descPoolClaims, descPoolMisses, descPoolRefill, descPoolDied, descAutoStreams, descMetricsShut} {
		ch <- d
	}
	for _, d := range localAgentDescs {
		ch <- d
	}
}

func (c *liveCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.live()
	ch <- prometheus.MustNewConstMetric(descSessions, prometheus.GaugeValue, float64(s.Sessions))
	ch <- prometheus.MustNewConstMetric(descBytes, prometheus.CounterValue, float64(s.BytesUp), "up")
	ch <- prometheus.MustNewConstMetric(descBytes, prometheus.CounterValue, float64(s.BytesDown), "down")
	ch <- prometheus.MustNewConstMetric(descThroughput, prometheus.GaugeValue, s.Throughput)
	ch <- prometheus.MustNewConstMetric(descReorder, prometheus.GaugeValue, float64(s.ReorderDepth))
	ch <- prometheus.MustNewConstMetric(descStalls, prometheus.CounterValue, float64(s.Stalls))
	ch <- prometheus.MustNewConstMetric(descAborts, prometheus.CounterValue, float64(s.Aborts))
	ch <- prometheus.MustNewConstMetric(descFlowMods, prometheus.CounterValue, float64(s.FlowMods))
	ch <- prometheus.MustNewConstMetric(descSwitches, prometheus.GaugeValue, float64(s.Connected), "connected")
	ch <- prometheus.MustNewConstMetric(descSwitches, prometheus.GaugeValue, float64(s.Switches-s.Connected), "disconnected")
	ch <- prometheus.MustNewConstMetric(descAgentsDown, prometheus.GaugeValue, float64(s.AgentsDown))
	ch <- prometheus.MustNewConstMetric(descFallbacks, prometheus.CounterValue, float64(s.Fallbacks))
	ch <- prometheus.MustNewConstMetric(descHSFailures, prometheus.CounterValue, float64(s.HandshakeFailures))
	ch <- prometheus.MustNewConstMetric(descHSAbandoned, prometheus.CounterValue, float64(s.HandshakesAbandoned))
	for _, reason := range relay.RejectReasons() {
		ch <- prometheus.MustNewConstMetric(descRefusals, prometheus.CounterValue, float64(s.Refusals[reason]), reason)
	}
	for _, a := range s.Agents {
		up := 0.0
		if a.Up {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(descAgentUp, prometheus.GaugeValue, up, a.Name)
		ch <- prometheus.MustNewConstMetric(descAgentSess, prometheus.GaugeValue, float64(a.Sessions), a.Name)
		seen := map[[2]string]bool{}
		for _, sh := range a.Shares {
			k := [2]string{sh.Whitelist, sh.Side}
			if seen[k] || sh.Of == 0 {
				continue // one series per whitelist and side, whatever the switch
			}
			seen[k] = true
			ch <- prometheus.MustNewConstMetric(descAgentShare, prometheus.GaugeValue, float64(sh.Buckets)/float64(sh.Of), a.Name, sh.Whitelist, sh.Side)
		}
	}
	collectLocalAgents(ch, s.Local)
	collectClosed(ch, descMetricsShut, s.MetricsClosed)
	ch <- prometheus.MustNewConstMetric(descMemory, prometheus.GaugeValue, float64(s.MemoryReserved), "reserved")
	ch <- prometheus.MustNewConstMetric(descMemory, prometheus.GaugeValue, float64(s.MemoryLimit), "limit")
	ch <- prometheus.MustNewConstMetric(descFrameMem, prometheus.GaugeValue, float64(s.FrameMemory.InUse), "in_use")
	ch <- prometheus.MustNewConstMetric(descFrameMem, prometheus.GaugeValue, float64(s.FrameMemory.Free), "free")
	ch <- prometheus.MustNewConstMetric(descFrameMem, prometheus.GaugeValue, float64(s.FrameMemory.Released), "released")
	ch <- prometheus.MustNewConstMetric(descLost, prometheus.CounterValue, float64(s.LostStreams.Lost))
	ch <- prometheus.MustNewConstMetric(descReplaced, prometheus.CounterValue, float64(s.LostStreams.Replaced))
	ch <- prometheus.MustNewConstMetric(descReinjected, prometheus.CounterValue, float64(s.LostStreams.ReinjectedBytes))
	ch <- prometheus.MustNewConstMetric(descDuplicates, prometheus.CounterValue, float64(s.LostStreams.DuplicatesDropped))
	for _, a := range s.AutoStreams {
		ch <- prometheus.MustNewConstMetric(descAutoStreams, prometheus.GaugeValue, float64(a.Min), a.Agent, a.Whitelist, "min")
		ch <- prometheus.MustNewConstMetric(descAutoStreams, prometheus.GaugeValue, float64(a.Max), a.Agent, a.Whitelist, "max")
	}
	for _, p := range s.Pools {
		ch <- prometheus.MustNewConstMetric(descPoolIdle, prometheus.GaugeValue, float64(p.Idle), p.Agent, p.Peer)
		ch <- prometheus.MustNewConstMetric(descPoolClaims, prometheus.CounterValue, float64(p.Claims), p.Agent, p.Peer)
		ch <- prometheus.MustNewConstMetric(descPoolMisses, prometheus.CounterValue, float64(p.Misses), p.Agent, p.Peer)
		ch <- prometheus.MustNewConstMetric(descPoolRefill, prometheus.CounterValue, float64(p.Refills), p.Agent, p.Peer)
		ch <- prometheus.MustNewConstMetric(descPoolDied, prometheus.CounterValue, float64(p.Died), p.Agent, p.Peer)
	}
}

// serve serves /metrics on addr until the returned stop is called. An empty
// addr turns metrics off.
func (m *metrics) serve(ctx context.Context, addr string) (func(), error) {
	if addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listener: %w", err)
	}
	return m.serveOn(ln), nil
}

// The metrics port's connection caps: Prometheus keeps one keep-alive
// connection per server scraping (connlimit).
const (
	metricsMaxConns          = 64
	metricsMaxConnsPerSource = 8
)

// allowFrom sets the sources the /metrics server accepts (none: any),
// and the local users besides root it accepts from this node while there
// are some, now and for a server started later. It returns the user names
// this node has no user of (they admit nobody).
func (m *metrics) allowFrom(prefixes []netip.Prefix, users []string) (unknown []string) {
	uids, unknown := connlimit.ResolveUsers(users)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.allow, m.users = slices.Clone(prefixes), uids
	if m.ln != nil {
		m.ln.AllowFrom(m.allow, m.users)
	}
	return unknown
}

func (m *metrics) serveOn(ln net.Listener) func() {
	capped := connlimit.New(ln, metricsMaxConns, metricsMaxConnsPerSource).WithCounts(&m.closed)
	m.mu.Lock()
	capped.AllowFrom(m.allow, m.users)
	m.ln = capped
	m.mu.Unlock()
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	srv := m.limits.server(mux)
	capped.Track(srv)
	go func() {
		if err := srv.Serve(capped); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = err
		}
	}()
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}
}

// httpLimits bound what one client can hold of an HTTP server: one that
// sends its request slowly or never finishes it (slowloris), reads the
// answer slowly, idles on a keep-alive connection or sends huge headers is
// cut off instead of pinning a connection and a goroutine for ever.
type httpLimits struct {
	readHeader time.Duration // request line and headers
	read       time.Duration // the whole request, body included
	write      time.Duration // from the end of the headers to the end of the answer
	idle       time.Duration // between requests on a keep-alive connection
	// maxHeaderBytes bounds the request line and headers; net/http answers
	// 431 past it (plus 4 KiB of buffer slack).
	maxHeaderBytes int
}

// metricsLimits fit a Prometheus scrape: a GET with a few headers, answered
// in milliseconds, within a 10 s scrape timeout, every 15 s to 1 min on one
// keep-alive connection. The metrics port may face the network.
var metricsLimits = httpLimits{
	readHeader:     5 * time.Second,
	read:           10 * time.Second,
	write:          30 * time.Second,
	idle:           90 * time.Second,
	maxHeaderBytes: 16 << 10,
}

func (l httpLimits) server(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: l.readHeader,
		ReadTimeout:       l.read,
		WriteTimeout:      l.write,
		IdleTimeout:       l.idle,
		MaxHeaderBytes:    l.maxHeaderBytes,
	}
}
