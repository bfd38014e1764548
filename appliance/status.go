package appliance

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sosappliance/sosappliance/dataplane/relay"
)

// Status is what `sosappliance status` shows and the control socket serves.
type Status struct {
	Node       string   `json:"node"`
	Roles      []string `json:"roles"`
	ConfigPath string   `json:"config_path"`
	ConfigHash string   `json:"config_hash"`
	// PSKIDs are the ids (PSKID) of the PSKs the local agents hold: one,
	// or none on a node without agents.
	PSKIDs      []string        `json:"psk_ids,omitempty"`
	Serial      uint64          `json:"serial"`
	StartedAt   time.Time       `json:"started_at"`
	LastApply   *ApplyInfo      `json:"last_apply,omitempty"`
	LastReload  *ReloadInfo     `json:"last_reload,omitempty"`
	Reloads     uint64          `json:"reloads"`
	ReloadFails uint64          `json:"reload_failures"`
	Drift       DriftInfo       `json:"drift"`
	Warnings    []string        `json:"warnings,omitempty"`
	Switches    []SwitchStatus  `json:"switches,omitempty"`
	Agents      []AgentStatus   `json:"agents,omitempty"`
	Sessions    []SessionStatus `json:"sessions,omitempty"`
	// Cluster is nil without a cluster block (clusternode.go).
	Cluster *ClusterStatus `json:"cluster,omitempty"`
	// LostStreams sums the local agents' lost-stream counters.
	LostStreams LostStreams `json:"lost_streams"`
	// Pools are the local client-side agents' warm stream pools, one per
	// far agent.
	Pools []PoolStatus `json:"pools,omitempty"`
}

// PoolStatus is one warm pool: its idle streams now and what sessions
// did with it (claims, and misses where they found it short) and what it
// opened (refills) or lost while idle (died, expired).
type PoolStatus struct {
	Agent   string `json:"agent"`
	Peer    string `json:"peer"`
	Address string `json:"address"`
	Idle    int    `json:"idle"`
	Target  int    `json:"target"`
	MinIdle int    `json:"min_idle"`
	Max     int    `json:"max"`
	Claims  uint64 `json:"claims"`
	Misses  uint64 `json:"misses"`
	Refills uint64 `json:"refills"`
	Died    uint64 `json:"died"`
	Expired uint64 `json:"expired"`
	// Refused is the far agent's refusal of pooled streams, Failures the
	// failed opens in a row, DiedYoung the deaths in a row of streams
	// younger than a second, and RetryIn the pause before the next open.
	Refused   string  `json:"refused,omitempty"`
	Failures  int     `json:"failures,omitempty"`
	DiedYoung int     `json:"died_young,omitempty"`
	RetryIn   float64 `json:"retry_in_seconds,omitempty"`
}

func poolStatuses(agent string, ps []relay.PoolStats) []PoolStatus {
	out := make([]PoolStatus, 0, len(ps))
	for _, p := range ps {
		ps := PoolStatus{Agent: agent, Peer: p.PeerName, Address: p.Peer.String(), Idle: p.Idle, Target: p.Target,
			MinIdle: p.MinIdle, Max: p.Max, Claims: p.Claims, Misses: p.Misses, Refills: p.Refills, Died: p.Died, Expired: p.Expired,
			Refused: p.Refused, Failures: p.Failures, DiedYoung: p.DiedYoung}
		if !p.RetryAt.IsZero() {
			ps.RetryIn = max(time.Until(p.RetryAt), 0).Round(time.Millisecond).Seconds()
		}
		out = append(out, ps)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Peer < out[j].Peer })
	return out
}

// LostStreams counts what the local agents did about lost stripe
// streams: lost, replaced by a join, frames and bytes sent again on
// the surviving streams, and duplicate copies dropped. HeadOfLine counts
// the frames and bytes sent again on a healthy stream while the live
// stream carrying them was in loss recovery and delivery waited for them.
type LostStreams struct {
	Lost              uint64 `json:"lost"`
	Replaced          uint64 `json:"replaced"`
	ReinjectedFrames  uint64 `json:"reinjected_frames"`
	ReinjectedBytes   uint64 `json:"reinjected_bytes"`
	DuplicatesDropped uint64 `json:"duplicates_dropped"`
	HeadOfLineFrames  uint64 `json:"head_of_line_frames"`
	HeadOfLineBytes   uint64 `json:"head_of_line_bytes"`
}

func (l *LostStreams) add(t relay.Totals) {
	l.Lost += t.StreamsLost
	l.Replaced += t.StreamsReplaced
	l.ReinjectedFrames += t.ReinjectedFrames
	l.ReinjectedBytes += t.ReinjectedBytes
	l.DuplicatesDropped += t.DuplicatesDropped
	l.HeadOfLineFrames += t.HeadOfLineFrames
	l.HeadOfLineBytes += t.HeadOfLineBytes
}

// ApplyInfo describes the last convergence.
type ApplyInfo struct {
	At      time.Time `json:"at"`
	Changes int       `json:"changes"`
	Result  string    `json:"result"` // "ok" or the error
}

// ReloadInfo describes the last reload attempt.
type ReloadInfo struct {
	At     time.Time `json:"at"`
	Hash   string    `json:"hash"`
	Result string    `json:"result"`
	// Problems are the refused file's errors, "FILE:LINE:COL: summary"
	// (at most maxReloadProblems; the log has them all).
	Problems []string `json:"problems,omitempty"`
}

// maxReloadProblems bounds the problems status keeps of a refused reload.
const maxReloadProblems = 10

// DriftInfo counts drift checks and corrections.
type DriftInfo struct {
	Interval    string            `json:"interval"`
	LastCheck   time.Time         `json:"last_check"`
	Corrections uint64            `json:"corrections"`
	ByKind      map[string]uint64 `json:"by_kind,omitempty"`
}

// SwitchStatus is one switch as the controller sees it.
type SwitchStatus struct {
	Name       string `json:"name"`
	DatapathID string `json:"datapath_id"`
	Connected  bool   `json:"connected"`
	Flows      int    `json:"flows"`
	FlowMods   uint64 `json:"flow_mods"`
	LastError  string `json:"last_error,omitempty"`
}

// AgentStatus is one agent: its health as the controller probes it, or,
// on an agent node, its own relay.
type AgentStatus struct {
	Name    string `json:"name"`
	Healthy bool   `json:"healthy"`
	Local   bool   `json:"local"`
	Detail  string `json:"detail,omitempty"`
	// Controller's view only: the sessions the agent last reported and
	// its part of each spread whitelist.
	Sessions int           `json:"sessions,omitempty"`
	Shares   []ShareStatus `json:"shares,omitempty"`
	// SessionsError is why the agent's last session report was not
	// taken (Sessions are then those read before).
	SessionsError string `json:"sessions_error,omitempty"`
	// A local agent's own counters: sessions it started over its
	// lifetime, payload it relayed each way, and the live sessions'
	// recent throughput, so the split of a site's load over its agents
	// shows per agent.
	SessionsStarted uint64  `json:"sessions_started,omitempty"`
	BytesUp         uint64  `json:"bytes_up,omitempty"`
	BytesDown       uint64  `json:"bytes_down,omitempty"`
	Throughput      float64 `json:"throughput_bps,omitempty"`
	// HealthClosed is what the local agent's health port closed unserved
	// (outside health_allow, or past its connection caps).
	HealthClosed relay.HTTPClosed `json:"health_closed,omitzero"`
	// PerAgentKeys: the local agent authenticates its streams with
	// per-agent keys, not the PSK alone.
	PerAgentKeys bool `json:"per_agent_keys,omitempty"`
}

// localAgentStatus is a local relay's line of `status`.
func localAgentStatus(name string, healthy bool, why string, rs relay.Stats) AgentStatus {
	as := AgentStatus{Name: name, Healthy: healthy, Local: true, PerAgentKeys: rs.PerAgentKeys,
		SessionsStarted: rs.Totals.SessionsStarted, BytesUp: rs.Totals.BytesUp, BytesDown: rs.Totals.BytesDown}
	for _, s := range rs.Sessions {
		as.Throughput += s.ThroughputUp + s.ThroughputDown
	}
	as.Detail = fmt.Sprintf("%s, %d session(s), %d stream(s), %d started, %s relayed, %s",
		why, rs.Totals.SessionsActive, rs.Totals.StreamsActive, as.SessionsStarted,
		formatBytes(as.BytesUp+as.BytesDown), formatRate(as.Throughput))
	if as.PerAgentKeys {
		as.Detail += ", per-agent keys"
	}
	if h := rs.Totals.HealthClosed; h.Total() > 0 {
		as.HealthClosed = h
		as.Detail += fmt.Sprintf("; health port closed %d denied, %d evicted, %d refused", h.Denied, h.Evicted, h.Refused)
	}
	return as
}

func formatBytes(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// ShareStatus is an agent's buckets of one spread whitelist on one switch.
type ShareStatus struct {
	Switch    string `json:"switch"`
	Whitelist string `json:"whitelist"`
	Side      string `json:"side"`
	Reverse   bool   `json:"reverse,omitempty"`
	Buckets   int    `json:"buckets"`
	Of        int    `json:"of"`
}

// SessionStatus is one live accelerated connection.
type SessionStatus struct {
	Agent     string `json:"agent"`
	Whitelist string `json:"whitelist"`
	Client    string `json:"client"`
	Server    string `json:"server"`
	Streams   int    `json:"streams"`
	// ReorderDepth is how many received chunks wait for an earlier one.
	ReorderDepth int     `json:"reorder_depth"`
	BytesUp      uint64  `json:"bytes_up"`
	BytesDown    uint64  `json:"bytes_down"`
	Throughput   float64 `json:"throughput_bps"`
	AgeSeconds   float64 `json:"age_seconds"`
	// StreamsLive of Streams are up; the session lost StreamsLost,
	// replaced StreamsReplaced and sent ReinjectedBytes again.
	StreamsLive     int    `json:"streams_live"`
	StreamsLost     uint64 `json:"streams_lost"`
	StreamsReplaced uint64 `json:"streams_replaced"`
	ReinjectedBytes uint64 `json:"reinjected_bytes"`
	// StreamsChosen is how many of Streams the session keeps open: all,
	// or under streams = "auto" (AutoStreams, client side) the count it
	// chose so far; Streams is then the whitelist's max_streams.
	StreamsChosen int  `json:"streams_chosen"`
	AutoStreams   bool `json:"auto_streams,omitempty"`
	// AutoState is where the choice stands: joining, measuring, held
	// back by an end host (more streams would not tell), kept (more did
	// not raise the rate), at the maximum.
	AutoState string `json:"auto_state,omitempty"`
	// WindowBytes is the session's receive window (the credit it grants
	// its peer beyond what it delivered), CreditWaits how often its
	// sending direction waited for the peer's; PacingBps the rate its
	// sending side paces its streams at together (0: not paced: one
	// stream, a path under 5 ms, or its pacing still starting up), and
	// StreamsRecovering how many of them are in loss recovery.
	WindowBytes       int     `json:"window_bytes,omitempty"`
	CreditWaits       uint64  `json:"credit_waits,omitempty"`
	PacingBps         float64 `json:"pacing_bps,omitempty"`
	StreamsRecovering int     `json:"streams_recovering,omitempty"`
}

// streamsText is a session's STREAMS column: live/total, or under
// streams = "auto" live/chosen with the maximum.
func (x SessionStatus) streamsText() string {
	if x.AutoStreams {
		return fmt.Sprintf("%d/%d (auto, max %d; %s)", x.StreamsLive, x.StreamsChosen, x.Streams, x.AutoState)
	}
	return fmt.Sprintf("%d/%d", x.StreamsLive, x.Streams)
}

// WriteText renders the status for a terminal.
func (s *Status) WriteText(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "node:\t%s (%s)\n", s.Node, strings.Join(s.Roles, ", "))
	fmt.Fprintf(tw, "config:\t%s sha256:%.12s\n", s.ConfigPath, s.ConfigHash)
	if len(s.PSKIDs) > 0 {
		fmt.Fprintf(tw, "psk id:\t%s\n", strings.Join(s.PSKIDs, ", "))
	}
	fmt.Fprintf(tw, "state serial:\t%d\n", s.Serial)
	fmt.Fprintf(tw, "up since:\t%s\n", s.StartedAt.Format(time.RFC3339))
	if a := s.LastApply; a != nil {
		fmt.Fprintf(tw, "last apply:\t%s, %d change(s), %s\n", a.At.Format(time.RFC3339), a.Changes, a.Result)
	}
	if r := s.LastReload; r != nil {
		fmt.Fprintf(tw, "last reload:\t%s, %s\n", r.At.Format(time.RFC3339), r.Result)
		for _, p := range r.Problems {
			fmt.Fprintf(tw, "\t  %s\n", p)
		}
	}
	fmt.Fprintf(tw, "reloads:\t%d (%d failed)\n", s.Reloads, s.ReloadFails)
	fmt.Fprintf(tw, "drift:\tevery %s, %d correction(s)%s\n", s.Drift.Interval, s.Drift.Corrections, byKind(s.Drift.ByKind))
	if c := s.Cluster; c != nil {
		etcd := "etcd reachable"
		if !c.Publishing {
			etcd = "etcd unreachable"
			if c.LastError != "" {
				etcd += " (" + c.LastError + ")"
			}
		}
		fmt.Fprintf(tw, "cluster:\t%s, %s\n", strings.Join(c.Etcd, " "), etcd)
		if c.Duplicate != "" {
			fmt.Fprintf(tw, "node name:\talso published by another process (%s): node names must be unique\n", c.Duplicate)
		}
		if c.Role != "" {
			fmt.Fprintf(tw, "openflow role:\t%s (generation %d, leader %q, since %s; %d takeover(s), %d step-down(s))\n",
				c.Role, c.Generation, c.Leader, c.RoleSince.Format(time.RFC3339), c.Takeovers, c.StepDowns)
		}
	}
	tw.Flush()
	for _, warn := range s.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
	if len(s.Switches) > 0 {
		fmt.Fprintln(w, "\nswitches:")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  NAME\tDATAPATH\tCONNECTED\tFLOWS\tFLOW MODS\tLAST ERROR")
		for _, sw := range s.Switches {
			fmt.Fprintf(tw, "  %s\t%s\t%v\t%d\t%d\t%s\n", sw.Name, sw.DatapathID, sw.Connected, sw.Flows, sw.FlowMods, sw.LastError)
		}
		tw.Flush()
	}
	if len(s.Agents) > 0 {
		fmt.Fprintln(w, "\nagents:")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  NAME\tHEALTHY\tLOCAL\tDETAIL")
		for _, a := range s.Agents {
			fmt.Fprintf(tw, "  %s\t%v\t%v\t%s\n", a.Name, a.Healthy, a.Local, a.Detail)
		}
		tw.Flush()
	}
	if len(s.Pools) > 0 {
		fmt.Fprintln(w, "\npools:")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  AGENT\tPEER\tIDLE\tTARGET (MIN-MAX)\tCLAIMS\tMISSES\tREFILLS\tDIED\tEXPIRED")
		for _, p := range s.Pools {
			fmt.Fprintf(tw, "  %s\t%s (%s)\t%d\t%d (%d-%d)\t%d\t%d\t%d\t%d\t%d\n", p.Agent, p.Peer, p.Address, p.Idle, p.Target,
				p.MinIdle, p.Max, p.Claims, p.Misses, p.Refills, p.Died, p.Expired)
		}
		tw.Flush()
		for _, p := range s.Pools {
			switch {
			case p.Refused != "":
				fmt.Fprintf(w, "  pool of %s toward %s: refused by %s (%s); %d attempts, next in %.0f s\n", p.Agent, p.Peer, p.Peer, p.Refused, p.Failures, p.RetryIn)
			case p.Failures > 0:
				fmt.Fprintf(w, "  pool of %s toward %s: %d failed opens in a row; next in %.0f s\n", p.Agent, p.Peer, p.Failures, p.RetryIn)
			case p.DiedYoung > 0:
				fmt.Fprintf(w, "  pool of %s toward %s: idle streams died within a second of opening, %d times in a row (does the path drop new connections?); opening one at a time, next in %.0f s\n",
					p.Agent, p.Peer, p.DiedYoung, p.RetryIn)
			}
		}
	}
	fmt.Fprintf(w, "\nsessions: %d\n", len(s.Sessions))
	if l := s.LostStreams; l != (LostStreams{}) {
		fmt.Fprintf(w, "lost streams: %d lost, %d replaced, %d bytes reinjected (%d frames), %d duplicates dropped\n",
			l.Lost, l.Replaced, l.ReinjectedBytes, l.ReinjectedFrames, l.DuplicatesDropped)
		if l.HeadOfLineFrames > 0 {
			fmt.Fprintf(w, "head of line: %d bytes (%d frames) sent again around streams in loss recovery\n",
				l.HeadOfLineBytes, l.HeadOfLineFrames)
		}
	}
	if len(s.Sessions) > 0 {
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  AGENT\tWHITELIST\tCLIENT\tSERVER\tSTREAMS\tLOST/REPLACED\tREINJECTED\tTHROUGHPUT\tAGE")
		for _, x := range s.Sessions {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%d/%d\t%d B\t%s\t%s\n", x.Agent, x.Whitelist, x.Client, x.Server,
				x.streamsText(), x.StreamsLost, x.StreamsReplaced, x.ReinjectedBytes,
				formatRate(x.Throughput), (time.Duration(x.AgeSeconds) * time.Second).String())
		}
		tw.Flush()
	}
}

func byKind(m map[string]uint64) string {
	if len(m) == 0 {
		return ""
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

func formatRate(bps float64) string {
	switch {
	case bps >= 1e9:
		return fmt.Sprintf("%.2f Gbit/s", bps/1e9)
	case bps >= 1e6:
		return fmt.Sprintf("%.1f Mbit/s", bps/1e6)
	case bps >= 1e3:
		return fmt.Sprintf("%.1f kbit/s", bps/1e3)
	}
	return fmt.Sprintf("%.0f bit/s", bps)
}
