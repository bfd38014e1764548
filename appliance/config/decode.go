package config

import (
	"cmp"
	"encoding/base64"
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"

	"github.com/sosappliance/sosappliance/appliance/profiles"
	"github.com/sosappliance/sosappliance/dataplane/agentspec"
	"github.com/sosappliance/sosappliance/dataplane/stripe"
	"github.com/sosappliance/sosappliance/internal/portrange"
	"github.com/sosappliance/sosappliance/sdn/spread"
)

// Defaults applied where the file is silent. Those of the limits block are
// agentspec's, the one set the relay also falls back to.
const (
	DefaultListen        = "127.0.0.1:6653"
	DefaultStatePath     = "/var/lib/sosappliance/state.db"
	DefaultControlSocket = "/run/sosappliance/control.sock"
	DefaultMetricsListen = "127.0.0.1:9465"
	DefaultDataPort      = 9877
	DefaultRelayPort     = 9876
	DefaultHealthPort    = 9878
	DefaultStreams       = 64
	// DefaultAutoMaxStreams is a whitelist's max_streams under
	// streams = "auto".
	DefaultAutoMaxStreams = 64
	// StreamsAuto is the value of streams that lets each session choose
	// its stream count.
	StreamsAuto        = "auto"
	DefaultChunkSize   = 60000
	DefaultQueueLength = 0 // no bound: the receive window follows the path
	MaxChunkSize       = 16 << 20

	DefaultSessionMemory  = agentspec.DefaultSessionMemory
	DefaultMaxStreams     = agentspec.DefaultMaxStreams
	DefaultMaxSessions    = agentspec.DefaultMaxSessions
	DefaultPreauthConns   = agentspec.DefaultMaxPreAuth
	DefaultPreauthTimeout = agentspec.DefaultPreAuthTimeout
	// Per source address: unauthenticated data-port connections (more
	// evict that address's oldest; an IPv6 /64 holds at most half of the
	// preauth connections) and server-side sessions still gathering
	// their streams.
	DefaultPreauthPerSource  = agentspec.DefaultMaxPreAuthPerSource
	DefaultHalfOpenPerSource = agentspec.DefaultMaxHalfOpenPerSource
	DefaultPooledPerPeer     = agentspec.DefaultMaxPooledPerPeer
	DefaultStallTimeout      = agentspec.DefaultStallTimeout
	DefaultIdleTimeout       = agentspec.DefaultHalfClosedIdle
	DefaultReconnectTimeout  = agentspec.DefaultReconnectTimeout

	DefaultKeepalive       = 5 * time.Second
	DefaultHealthInterval  = 2 * time.Second
	DefaultDriftInterval   = 30 * time.Second
	DefaultShutdownTimeout = 30 * time.Second
)

var rootSchema = &hcl.BodySchema{
	Blocks: []hcl.BlockHeaderSchema{
		{Type: "controller"},
		{Type: "cluster"},
		{Type: "security"},
		{Type: "daemon"},
		{Type: "limits"},
		{Type: "spread"},
		{Type: "site", LabelNames: []string{"name"}},
		{Type: "whitelist", LabelNames: []string{"name"}},
		{Type: "tuning", LabelNames: []string{"name"}},
		{Type: "node", LabelNames: []string{"name"}},
		{Type: "pool", LabelNames: []string{"agent"}},
	},
}

// attrs reads the attributes of one block, collecting every problem in diags
// so that one run reports them all.
type attrs struct {
	m     hcl.Attributes
	diags *hcl.Diagnostics
	// bad holds the arguments already reported as unreadable: a second
	// read of one (a check after the decode) reports nothing again.
	bad map[string]bool
}

func newAttrs(body hcl.Body, schema *hcl.BodySchema, diags *hcl.Diagnostics) (*attrs, hcl.Blocks) {
	content, d := body.Content(schema)
	*diags = append(*diags, d...)
	if content == nil {
		return &attrs{m: hcl.Attributes{}, diags: diags}, nil
	}
	return &attrs{m: content.Attributes, diags: diags}, content.Blocks
}

func (a *attrs) has(name string) bool { _, ok := a.m[name]; return ok }

func (a *attrs) rng(name string) hcl.Range {
	if at, ok := a.m[name]; ok {
		return at.Expr.Range()
	}
	return hcl.Range{}
}

func (a *attrs) errorf(name, summary, hint string, args ...any) {
	*a.diags = append(*a.diags, &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  fmt.Sprintf(summary, args...),
		Detail:   hint,
		Subject:  a.rng(name).Ptr(),
	})
}

func (a *attrs) value(name string, want cty.Type, wantName string) (cty.Value, bool) {
	at, ok := a.m[name]
	if !ok || a.bad[name] {
		return cty.NilVal, false
	}
	if a.bad == nil {
		a.bad = map[string]bool{}
	}
	v, d := at.Expr.Value(nil)
	if d.HasErrors() {
		*a.diags = append(*a.diags, d...)
		a.bad[name] = true
		return cty.NilVal, false
	}
	if v.IsNull() {
		a.errorf(name, "%s must not be null", "Remove the argument or give it a value.", name)
		a.bad[name] = true
		return cty.NilVal, false
	}
	var cv cty.Value
	var err error
	if want.Equals(cty.List(cty.String)) && v.Type().IsTupleType() && v.IsWhollyKnown() && !v.ContainsMarked() {
		// cty unifies a tuple's element types by sorting them, which
		// took 11 s for a list of 20,000 strings: convert each element.
		cv, err = stringList(v)
	} else {
		cv, err = convert.Convert(v, want)
	}
	if err != nil || !cv.IsWhollyKnown() {
		a.errorf(name, "%s must be %s", fmt.Sprintf("Write it as %s.", exampleOf(wantName)), name, wantName)
		a.bad[name] = true
		return cty.NilVal, false
	}
	return cv, true
}

// stringList converts a tuple to a list of strings element by element,
// as convert.Convert would.
func stringList(v cty.Value) (cty.Value, error) {
	if v.LengthInt() == 0 {
		return cty.ListValEmpty(cty.String), nil
	}
	elems := make([]cty.Value, 0, v.LengthInt())
	for _, e := range v.AsValueSlice() {
		ce, err := convert.Convert(e, cty.String)
		if err != nil {
			return cty.NilVal, err
		}
		elems = append(elems, ce)
	}
	return cty.ListVal(elems), nil
}

func exampleOf(wantName string) string {
	switch wantName {
	case "a string":
		return `a quoted string, e.g. "value"`
	case "a whole number":
		return "a number without quotes, e.g. 64"
	case "a list of strings":
		return `a list, e.g. ["10.10.1.0/24"]`
	case "a map of strings":
		return `a map, e.g. { "net.core.rmem_max" = "134217728" }`
	case "true or false":
		return "true or false"
	}
	return wantName
}

// given reads a string argument the file sets: ok is false when it does
// not set it, or sets something that is not a string (reported), so that
// a check of the value does not report the argument again.
func (a *attrs) given(name string) (string, bool) {
	v, ok := a.value(name, cty.String, "a string")
	if !ok {
		return "", false
	}
	return v.AsString(), true
}

func (a *attrs) str(name, def string) string {
	v, ok := a.value(name, cty.String, "a string")
	if !ok {
		return def
	}
	return v.AsString()
}

func (a *attrs) boolean(name string, def bool) bool {
	v, ok := a.value(name, cty.Bool, "true or false")
	if !ok {
		return def
	}
	return v.True()
}

// integer reads a whole number in [lo, hi]; def is returned when absent or
// wrong, so later checks do not pile up on one mistake.
func (a *attrs) integer(name string, def, lo, hi int64) int64 {
	v, ok := a.value(name, cty.Number, "a whole number")
	if !ok {
		return def
	}
	bf := v.AsBigFloat()
	if !bf.IsInt() {
		a.errorf(name, "%s must be a whole number", "Drop the fraction.", name)
		return def
	}
	n, acc := bf.Int64()
	if acc != big.Exact || n < lo || n > hi {
		a.errorf(name, "%s must be between %d and %d", "Pick a value inside the range.", name, lo, hi)
		return def
	}
	return n
}

// byteSize reads a plain integer or a string such as "60KB" in [lo, hi].
func (a *attrs) byteSize(name string, def, lo, hi int64) int64 {
	at, ok := a.m[name]
	if !ok {
		return def
	}
	v, d := at.Expr.Value(nil)
	if d.HasErrors() {
		*a.diags = append(*a.diags, d...)
		return def
	}
	var n int64
	switch {
	case v.Type() == cty.Number:
		return a.integer(name, def, lo, hi)
	case v.Type() == cty.String && v.IsKnown() && !v.IsNull():
		var err error
		if n, err = ParseByteSize(v.AsString()); err != nil {
			a.errorf(name, "%s: %v", `Write bytes as 60000 or with a unit: "60KB" (1000), "64KiB" (1024), "1GiB".`, name, err)
			return def
		}
	default:
		a.errorf(name, "%s must be a byte size", `Write bytes as 60000 or with a unit: "60KB", "64KiB".`, name)
		return def
	}
	if n < lo || n > hi {
		a.errorf(name, "%s must be between %d and %d bytes", "Pick a size inside the range.", name, lo, hi)
		return def
	}
	return n
}

func (a *attrs) strList(name string) []string {
	v, ok := a.value(name, cty.List(cty.String), "a list of strings")
	if !ok {
		return nil
	}
	out := make([]string, 0, v.LengthInt())
	for _, e := range v.AsValueSlice() {
		if e.IsNull() {
			a.errorf(name, "%s must not contain null", "Remove the null element.", name)
			continue
		}
		out = append(out, e.AsString())
	}
	return out
}

// allowList reads an allow list of source prefixes: what names the block
// ("switch \"sw1\""), hint says what to list. An attribute that is there
// but empty is an error: it would admit no one, or read as admitting any.
func (a *attrs) allowList(name, what, hint string) []netip.Prefix {
	before := len(a.diags.Errs())
	list := a.strList(name)
	var out []netip.Prefix
	for _, p := range list {
		pfx, err := ParsePrefix(p)
		if err != nil {
			a.errorf(name, "%s %s: %v", hint, what, name, err)
			continue
		}
		out = append(out, pfx)
	}
	if a.has(name) && len(list) == 0 && len(a.diags.Errs()) == before {
		a.errorf(name, "%s %s is empty", "List at least one prefix, or remove "+name+" to accept any address.", what, name)
	}
	return out
}

// allowUsers reads a list of the local users, by name or uid, that an
// allow list (list) admits besides root from the node itself. Users are
// looked up where the list is used: a config shared by several nodes may
// name a user some of them lack.
func (a *attrs) allowUsers(name, list, what string) []string {
	users := a.strList(name)
	for _, u := range users {
		digits := u != "" && strings.Trim(u, "0123456789") == ""
		if id, err := strconv.ParseUint(u, 10, 32); u == "" || strings.ContainsAny(u, " \t\n:/") || strings.HasPrefix(u, "-") || digits && (err != nil || id == 1<<32-1) {
			a.errorf(name, "%s %s: %q is not a user name or uid", `Name a local user ("prometheus") or give its uid ("110").`, what, name, u)
		}
	}
	if a.has(name) && !a.has(list) {
		a.errorf(name, "%s %s is set without %s", "It names the users of the node itself that "+list+" admits besides root; with no "+list+" every source and user is admitted. Add "+list+", or remove "+name+".", what, name, list)
	}
	return users
}

func (a *attrs) strMap(name string) map[string]string {
	v, ok := a.value(name, cty.Map(cty.String), "a map of strings")
	if !ok {
		return nil
	}
	out := map[string]string{}
	for k, e := range v.AsValueMap() {
		if e.IsNull() {
			a.errorf(name, "%s[%q] must not be null", "Give it a value.", name, k)
			continue
		}
		out[k] = e.AsString()
	}
	return out
}

// maxDuration bounds every duration of the file: longer ones are typos,
// and twice one (a keepalive's dead-peer time) must not overflow.
const maxDuration = 30 * 24 * time.Hour

func (a *attrs) duration(name string, def time.Duration) time.Duration {
	return a.durationAtLeast(name, def, 0)
}

// durationAtLeast is duration for an interval that runs work each time
// it passes: below lo the work would never stop (a keepalive of 1ns is an
// echo storm to every switch).
func (a *attrs) durationAtLeast(name string, def, lo time.Duration) time.Duration {
	s, ok := a.value(name, cty.String, "a string")
	if !ok {
		return def
	}
	v, err := ParseDuration(s.AsString())
	switch {
	case err != nil:
		a.errorf(name, "%s: %v", `Use a duration such as "500ms", "30s" or "5m".`, name, err)
		return def
	case v < lo:
		a.errorf(name, "%s %s is shorter than %s", "It sets how often work is done; a shorter one would keep the node busy.", name, v, lo)
		return def
	case v > maxDuration:
		a.errorf(name, "%s %s is longer than %s", "Durations here are seconds to hours.", name, v, maxDuration)
		return def
	}
	return v
}

func diagAt(rng hcl.Range, summary, hint string) *hcl.Diagnostic {
	r := rng
	return &hcl.Diagnostic{Severity: hcl.DiagError, Summary: summary, Detail: hint, Subject: &r}
}

func decodeRoot(body hcl.Body, cfg *Config) hcl.Diagnostics {
	var diags hcl.Diagnostics
	_, blocks := newAttrs(body, rootSchema, &diags)

	once := map[string]*hcl.Block{}
	for _, b := range blocks {
		switch b.Type {
		case "cluster", "security", "daemon", "limits", "spread":
			if prev, dup := once[b.Type]; dup {
				diags = append(diags, diagAt(b.DefRange, fmt.Sprintf("Duplicate %s block", b.Type),
					fmt.Sprintf("Only one %s block is allowed; the first is at %s.", b.Type, prev.DefRange)))
				continue
			}
			once[b.Type] = b
		}
		switch b.Type {
		case "controller":
			cfg.Controllers = append(cfg.Controllers, decodeController(b, &diags))
		case "cluster":
			cfg.Cluster = decodeCluster(b, &diags)
		case "security":
			cfg.Security = decodeSecurity(b, &diags)
		case "daemon":
			cfg.Daemon = decodeDaemon(b.Body, &diags)
		case "limits":
			cfg.Limits = decodeLimits(b, &diags)
		case "spread":
			cfg.Spread = decodeSpread(b, &diags)
		case "site":
			cfg.Sites = append(cfg.Sites, decodeSite(b, &diags))
		case "whitelist":
			cfg.Whitelists = append(cfg.Whitelists, decodeWhitelist(b, &diags))
		case "tuning":
			cfg.Tunings = append(cfg.Tunings, decodeTuning(b, &diags))
		case "node":
			cfg.Nodes = append(cfg.Nodes, decodeNode(b, &diags))
		case "pool":
			cfg.Pools = append(cfg.Pools, decodePool(b, &diags))
		}
	}
	if len(cfg.Controllers) > 0 {
		cfg.Controller = cfg.Controllers[0]
	}
	if once["daemon"] == nil {
		cfg.Daemon = decodeDaemon(hcl.EmptyBody(), &diags)
	}
	if once["limits"] == nil {
		cfg.Limits = decodeLimits(&hcl.Block{Body: hcl.EmptyBody()}, &diags)
	}
	if once["spread"] == nil {
		cfg.Spread = Spread{Mode: string(spread.ModePort)}
	}
	if once["security"] == nil {
		diags = append(diags, diagAt(fileStart(body), "Missing security block",
			`Add security { psk_file = "/etc/sosappliance/psk" }: agents authenticate each other with it.`))
	}
	return diags
}

func fileStart(body hcl.Body) hcl.Range {
	r := body.MissingItemRange()
	r.Start = hcl.Pos{Line: 1, Column: 1, Byte: 0}
	r.End = r.Start
	return r
}

var controllerSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "node", Required: true}, {Name: "listen"}, {Name: "keepalive"},
		{Name: "health_interval"}, {Name: "remove_flows_on_stop"},
	},
	Blocks: []hcl.BlockHeaderSchema{{Type: "tls"}},
}

func decodeController(b *hcl.Block, diags *hcl.Diagnostics) *Controller {
	a, blocks := newAttrs(b.Body, controllerSchema, diags)
	c := &Controller{
		Node:              a.str("node", ""),
		Listen:            a.str("listen", DefaultListen),
		Keepalive:         a.durationAtLeast("keepalive", DefaultKeepalive, 100*time.Millisecond),
		HealthInterval:    a.durationAtLeast("health_interval", DefaultHealthInterval, 100*time.Millisecond),
		RemoveFlowsOnStop: a.boolean("remove_flows_on_stop", false),
		Range:             b.DefRange,
	}
	if a.has("node") && strings.TrimSpace(c.Node) == "" {
		a.errorf("node", "controller node must not be empty", "Name the node (its hostname) that runs the OpenFlow controller.")
	}
	if err := ValidHostPort(c.Listen); err != nil {
		a.errorf("listen", "controller listen: %v", `Use "IP:PORT" on the network the switches reach, e.g. "192.0.2.1:6653".`, err)
	}
	for _, blk := range blocks {
		if c.TLS != nil {
			*diags = append(*diags, diagAt(blk.DefRange, "Duplicate tls block",
				fmt.Sprintf("Only one tls block is allowed in controller; the first is at %s.", c.TLS.Range)))
			continue
		}
		c.TLS = decodeControllerTLS(blk, diags)
	}
	return c
}

var controllerTLSSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{
	{Name: "cert_file", Required: true}, {Name: "key_file", Required: true}, {Name: "ca_file", Required: true},
}}

func decodeControllerTLS(b *hcl.Block, diags *hcl.Diagnostics) *ControllerTLS {
	a, _ := newAttrs(b.Body, controllerTLSSchema, diags)
	t := &ControllerTLS{
		CertFile: a.str("cert_file", ""),
		KeyFile:  a.str("key_file", ""),
		CAFile:   a.str("ca_file", ""),
		Range:    b.DefRange,
	}
	hints := map[string]string{
		"cert_file": "the controller's certificate (PEM), which switches verify with their CA",
		"key_file":  "the controller's private key (PEM)",
		"ca_file":   "the CA certificate (PEM) that signed the switches' certificates",
	}
	for _, name := range []string{"cert_file", "key_file", "ca_file"} {
		if v := a.str(name, "/"); !strings.HasPrefix(v, "/") {
			a.errorf(name, "tls %s must be an absolute path", "Write the full path of "+hints[name]+".", name)
		}
	}
	return t
}

var securitySchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{
	{Name: "psk_file", Required: true}, {Name: "encryption"},
}}

func decodeSecurity(b *hcl.Block, diags *hcl.Diagnostics) Security {
	a, _ := newAttrs(b.Body, securitySchema, diags)
	s := Security{
		PSKFile:    a.str("psk_file", ""),
		Encryption: a.str("encryption", EncryptionAESGCM),
		Range:      b.DefRange,
	}
	if s.PSKFile != "" && !strings.HasPrefix(s.PSKFile, "/") {
		a.errorf("psk_file", "psk_file must be an absolute path", `Write the full path, e.g. "/etc/sosappliance/psk".`)
	}
	if s.Encryption != EncryptionAESGCM && s.Encryption != EncryptionNone {
		a.errorf("encryption", "encryption must be %q or %q", `"none" turns off stripe sealing; use it only on trusted links, explicitly.`, EncryptionAESGCM, EncryptionNone)
	}
	return s
}

var daemonSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{
	{Name: "state_path"}, {Name: "control_socket"}, {Name: "metrics_listen"}, {Name: "metrics_allow"}, {Name: "metrics_allow_users"},
	{Name: "drift_interval"}, {Name: "shutdown_timeout"}, {Name: "log_format"},
}}

func decodeDaemon(body hcl.Body, diags *hcl.Diagnostics) Daemon {
	a, _ := newAttrs(body, daemonSchema, diags)
	d := Daemon{
		StatePath:       a.str("state_path", DefaultStatePath),
		ControlSocket:   a.str("control_socket", DefaultControlSocket),
		MetricsListen:   a.str("metrics_listen", DefaultMetricsListen),
		DriftInterval:   a.durationAtLeast("drift_interval", DefaultDriftInterval, time.Second),
		ShutdownTimeout: a.duration("shutdown_timeout", DefaultShutdownTimeout),
		LogFormat:       a.str("log_format", "text"),
	}
	for name, v := range map[string]string{"state_path": d.StatePath, "control_socket": d.ControlSocket} {
		if !strings.HasPrefix(v, "/") {
			a.errorf(name, "%s must be an absolute path", "Write the full path.", name)
		}
	}
	if d.MetricsListen != "" {
		if err := ValidHostPort(d.MetricsListen); err != nil {
			a.errorf("metrics_listen", "metrics_listen: %v", `Use "127.0.0.1:9465", or "" to turn metrics off.`, err)
		}
	}
	d.MetricsAllow = a.allowList("metrics_allow", "daemon", `List the addresses Prometheus scrapes from, e.g. ["192.0.2.10/32"].`)
	d.MetricsAllowUsers = a.allowUsers("metrics_allow_users", "metrics_allow", "daemon")
	if d.LogFormat != "text" && d.LogFormat != "json" {
		a.errorf("log_format", `log_format must be "text" or "json"`, "Text reads best in a terminal, JSON in a log pipeline.")
	}
	return d
}

var limitsSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{
	{Name: "max_sessions"}, {Name: "max_streams"}, {Name: "session_memory"},
	{Name: "preauth_connections"}, {Name: "preauth_timeout"},
	{Name: "stall_timeout"}, {Name: "idle_timeout"},
	{Name: "reconnect_timeout"},
	{Name: "memory"}, {Name: "preauth_per_source"}, {Name: "half_open_per_source"},
	{Name: "pooled_per_peer"}, {Name: "sessions_per_peer"},
}}

func decodeLimits(b *hcl.Block, diags *hcl.Diagnostics) Limits {
	a, _ := newAttrs(b.Body, limitsSchema, diags)
	return Limits{
		MaxSessions:        int(a.integer("max_sessions", DefaultMaxSessions, 1, 1<<20)),
		SessionsPerPeer:    int(a.integer("sessions_per_peer", 0, 1, 1<<20)),
		MaxStreams:         int(a.integer("max_streams", DefaultMaxStreams, 1, 1<<16)),
		SessionMemory:      a.byteSize("session_memory", DefaultSessionMemory, 64<<10, 1<<40),
		PreauthConnections: int(a.integer("preauth_connections", DefaultPreauthConns, 1, 1<<20)),
		PreauthTimeout:     a.duration("preauth_timeout", DefaultPreauthTimeout),
		StallTimeout:       a.duration("stall_timeout", DefaultStallTimeout),
		IdleTimeout:        a.duration("idle_timeout", DefaultIdleTimeout),
		ReconnectTimeout:   a.duration("reconnect_timeout", DefaultReconnectTimeout),
		Memory:             a.byteSize("memory", 0, 1<<20, 1<<50),
		PreauthPerSource:   int(a.integer("preauth_per_source", DefaultPreauthPerSource, 1, 1<<20)),
		HalfOpenPerSource:  int(a.integer("half_open_per_source", DefaultHalfOpenPerSource, 1, 1<<20)),
		PooledPerPeer:      int(a.integer("pooled_per_peer", DefaultPooledPerPeer, 0, 1<<16)),
		PooledPerPeerRange: a.rng("pooled_per_peer"),
		Range:              b.DefRange,
		SessionMemoryRange: a.rng("session_memory"),
		MaxStreamsRange:    a.rng("max_streams"),
	}
}

var siteSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{{Name: "prefixes", Required: true}},
	Blocks: []hcl.BlockHeaderSchema{
		{Type: "switch", LabelNames: []string{"name"}},
		{Type: "agent", LabelNames: []string{"name"}},
	},
}

func decodeSite(b *hcl.Block, diags *hcl.Diagnostics) *Site {
	a, blocks := newAttrs(b.Body, siteSchema, diags)
	s := &Site{Name: b.Labels[0], Range: b.DefRange, PrefixesRange: a.rng("prefixes")}
	before := len(diags.Errs())
	for _, p := range a.strList("prefixes") {
		pfx, err := ParsePrefix(p)
		if err != nil {
			a.errorf("prefixes", "site %q prefixes: %v", "List the site's networks in CIDR form, e.g. \"10.10.1.0/24\" or \"2001:db8:1::/48\".", s.Name, err)
			continue
		}
		s.Prefixes = append(s.Prefixes, pfx)
	}
	s.incomplete = len(diags.Errs()) > before || !a.has("prefixes")
	if !s.incomplete && len(s.Prefixes) == 0 {
		a.errorf("prefixes", "site %q has no prefixes", "List at least one network of the site.", s.Name)
	}
	for _, blk := range blocks {
		switch blk.Type {
		case "switch":
			sw := decodeSwitch(blk, diags)
			sw.Site = s.Name
			s.Switches = append(s.Switches, sw)
		case "agent":
			ag := decodeAgent(blk, diags)
			ag.Site = s.Name
			s.Agents = append(s.Agents, ag)
		}
	}
	return s
}

var switchSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{
	{Name: "datapath_id", Required: true}, {Name: "forwarding"}, {Name: "connect"},
	{Name: "tls"}, {Name: "allow"}, {Name: "port_masks"}, {Name: "tls_name"},
}}

func decodeSwitch(b *hcl.Block, diags *hcl.Diagnostics) *Switch {
	a, _ := newAttrs(b.Body, switchSchema, diags)
	sw := &Switch{Name: b.Labels[0], Forwarding: a.str("forwarding", "normal"), Connect: a.str("connect", ""),
		PortMasks: a.boolean("port_masks", true), Range: b.DefRange}
	if v, ok := a.given("datapath_id"); ok {
		dpid, err := ParseDatapathID(v)
		if err != nil {
			a.errorf("datapath_id", "switch %q: %v", `Write the 64-bit datapath id as "00:00:00:00:00:00:00:01" (ovs-ofctl show prints it).`, sw.Name, err)
		}
		sw.DatapathID = dpid
	}
	if sw.Forwarding != "normal" {
		a.errorf("forwarding", `switch %q: forwarding must be "normal"`, "sosappliance runs switches in hybrid mode: everything it does not steer goes to OFPP_NORMAL.", sw.Name)
	}
	if sw.Connect != "" {
		addr, ok := strings.CutPrefix(sw.Connect, "tcp:")
		if !ok || ValidHostPort(addr) != nil {
			a.errorf("connect", "switch %q: connect must be \"tcp:IP:PORT\"", `Point at a switch listening with ptcp:, e.g. "tcp:192.0.2.10:6653".`, sw.Name)
		}
	}
	sw.tlsSet, sw.TLS, sw.TLSRange = a.has("tls"), a.boolean("tls", false), a.rng("tls")
	sw.AllowRange = a.rng("allow")
	sw.TLSName, sw.TLSNameRange = a.str("tls_name", ""), a.rng("tls_name")
	if a.has("tls_name") && (strings.TrimSpace(sw.TLSName) != sw.TLSName || sw.TLSName == "") {
		a.errorf("tls_name", "switch %q tls_name %q: empty, or with spaces around it", `Write the name its certificate carries, e.g. "sw-clemson" (ovs-pki req sw-clemson).`, sw.Name, sw.TLSName)
	}
	sw.Allow = a.allowList("allow", fmt.Sprintf("switch %q", sw.Name), `List the addresses the switch connects from, e.g. ["192.0.2.10/32"].`)
	if sw.Connect != "" {
		if sw.tlsSet && sw.TLS {
			a.errorf("tls", "switch %q: tls is for switches that connect to the controller", "The controller dials this switch (connect) over plain TCP; let the switch connect with ssl: instead.", sw.Name)
		}
		if a.has("allow") {
			a.errorf("allow", "switch %q: allow is for switches that connect to the controller", "The controller dials this switch at its connect address; remove allow.", sw.Name)
		}
		if a.has("tls_name") {
			a.errorf("tls_name", "switch %q: tls_name is for switches that connect to the controller over TLS", "The controller dials this switch (connect) over plain TCP; remove tls_name, or let the switch connect with ssl:.", sw.Name)
		}
	}
	return sw
}

var agentSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{
	{Name: "node", Required: true}, {Name: "switch", Required: true},
	{Name: "switch_port", Required: true}, {Name: "mac", Required: true},
	{Name: "address", Required: true}, {Name: "interface", Required: true},
	{Name: "data_port"}, {Name: "relay_port"}, {Name: "health_listen"}, {Name: "health_allow"}, {Name: "health_allow_users"}, {Name: "tuning"},
	{Name: "public_key"}, {Name: "key_file"},
	{Name: "steering_mark"}, {Name: "steering_table"}, {Name: "steering_priority"},
}}

func decodeAgent(b *hcl.Block, diags *hcl.Diagnostics) *Agent {
	a, _ := newAttrs(b.Body, agentSchema, diags)
	ag := &Agent{
		Name:            b.Labels[0],
		Node:            a.str("node", ""),
		Switch:          a.str("switch", ""),
		SwitchPort:      uint32(a.integer("switch_port", 0, 1, 0xffffff00-1)),
		Interface:       a.str("interface", ""),
		DataPort:        uint16(a.integer("data_port", DefaultDataPort, 1, 65535)),
		RelayPort:       uint16(a.integer("relay_port", DefaultRelayPort, 1, 65535)),
		Tuning:          a.strList("tuning"),
		Range:           b.DefRange,
		SwitchRange:     a.rng("switch"),
		SwitchPortRange: a.rng("switch_port"),
		TuningRange:     a.rng("tuning"),
	}
	if v, ok := a.given("mac"); ok {
		mac, err := ParseMAC(v)
		if err != nil {
			a.errorf("mac", "agent %q mac: %v", `Write the agent interface's MAC as "02:00:00:00:01:02" (ip link show prints it).`, ag.Name, err)
		}
		ag.MAC = mac
	}
	if a.has("address") {
		addr, err := ParseAddr(a.str("address", ""))
		if err != nil {
			a.errorf("address", "agent %q address: %v", `Write the agent's address, e.g. "10.10.1.2" or "2001:db8:1::2".`, ag.Name, err)
		}
		ag.Address = addr
	}
	if a.has("interface") && !validInterfaceName(ag.Interface) {
		a.errorf("interface", "agent %q: %q is not a network interface name", "Interface names are 1-15 characters without spaces, '/' or ':'.", ag.Name, ag.Interface)
	}
	if a.has("node") && strings.TrimSpace(ag.Node) == "" {
		a.errorf("node", "agent %q: node must not be empty", "Name the node (hostname) that runs this agent.", ag.Name)
	}
	if ag.DataPort == ag.RelayPort {
		// At the port the file sets (the other is the default).
		at := "data_port"
		if !a.has("data_port") {
			at = "relay_port"
		}
		a.errorf(at, "agent %q: data_port and relay_port are both %d", "The stripe listener and the transparent listener need different ports.", ag.Name, ag.DataPort)
	}
	ag.HealthListen = a.str("health_listen", "")
	if ag.HealthListen == "" && ag.Address.IsValid() {
		ag.HealthListen = netip.AddrPortFrom(ag.Address, DefaultHealthPort).String()
	} else if ag.HealthListen != "" {
		if _, err := netip.ParseAddrPort(ag.HealthListen); err != nil {
			a.errorf("health_listen", "agent %q health_listen %q is not an IP address and port", `Use "IP:PORT" (a name or an empty host is not taken), e.g. "0.0.0.0:9878"; the controller probes GET /healthz there.`, ag.Name, ag.HealthListen)
		}
	}
	ag.HealthAllow, ag.HealthAllowRange = a.allowList("health_allow", fmt.Sprintf("agent %q", ag.Name), `List the addresses the controller nodes probe from, e.g. ["192.0.2.10/32"].`), a.rng("health_allow")
	ag.HealthAllowUsers = a.allowUsers("health_allow_users", "health_allow", fmt.Sprintf("agent %q", ag.Name))
	ag.PublicKeyRange, ag.KeyFileRange = a.rng("public_key"), a.rng("key_file")
	if a.has("public_key") {
		v, readable := a.given("public_key")
		key, err := ParseAgentPublicKey(v)
		if err != nil {
			if readable {
				a.errorf("public_key", "agent %q public_key: %v", "Paste the line `sosappliance keygen` printed on the agent's node.", ag.Name, err)
			}
			key = []byte{} // given, if bad: the agent is not one without a key
		}
		ag.PublicKey = key
		ag.KeyFile = a.str("key_file", DefaultAgentKeyFile)
		if !strings.HasPrefix(ag.KeyFile, "/") {
			a.errorf("key_file", "agent %q: key_file must be an absolute path", `Write the full path on the agent's node, e.g. "`+DefaultAgentKeyFile+`".`, ag.Name)
		}
	} else if a.has("key_file") {
		a.errorf("key_file", "agent %q: key_file without public_key", "Per-agent keys need both: run `sosappliance keygen --out FILE` on the agent's node and add the public_key it prints.", ag.Name)
	}
	decodeSteering(a, ag)
	return ag
}

// decodeSteering reads the agent's steering numbers; what is not given
// stays 0, the default.
func decodeSteering(a *attrs, ag *Agent) {
	if v, ok := a.given("steering_mark"); ok {
		base, digits := 10, v
		if d, hex := strings.CutPrefix(strings.ToLower(v), "0x"); hex {
			base, digits = 16, d
		}
		n, err := strconv.ParseUint(digits, base, 32)
		if err != nil || n == 0 {
			a.errorf("steering_mark", "agent %q: steering_mark %q is not a packet mark from 1 to 0xffffffff", `Write it as a number or in hex, e.g. "0x534f" (the default); pick one no other rule or firewall on the node sets (ip rule, nft list ruleset).`, ag.Name, v)
		} else {
			ag.SteeringMark = uint32(n)
		}
	}
	ag.SteeringTable = uint32(a.integer("steering_table", 0, 1, 0xffffffff))
	if t := ag.SteeringTable; t >= 253 && t <= 255 {
		a.errorf("steering_table", "agent %q: steering_table %d is a system routing table (253 default, 254 main, 255 local)", "Pick a table of its own, e.g. 21327 (the default); steering puts one local route in it.", ag.Name, t)
		ag.SteeringTable = 0
	}
	ag.SteeringPriority = uint32(a.integer("steering_priority", 0, 1, 32765))
}

// DefaultAgentKeyFile is where an agent's node holds its private key
// (per-agent keys) unless key_file says otherwise.
const DefaultAgentKeyFile = "/etc/sosappliance/agent.key"

// ParseAgentPublicKey reads a public_key: the standard base64 of a 32-byte
// X25519 public key, in its one canonical encoding (so that two agents
// cannot hold one key written two ways) and not of small order (with
// which no key agreement is possible).
func ParseAgentPublicKey(s string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	switch {
	case err != nil:
		return nil, fmt.Errorf("not base64: %v", err)
	case len(key) != stripe.AgentKeySize:
		return nil, fmt.Errorf("%d bytes, want %d (44 base64 characters)", len(key), stripe.AgentKeySize)
	}
	if err := stripe.CheckAgentPublicKey(key); err != nil {
		return nil, err
	}
	return key, nil
}

var whitelistSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{
	{Name: "clients", Required: true}, {Name: "server"}, {Name: "servers"},
	{Name: "server_port"}, {Name: "server_ports"}, {Name: "direction"},
	{Name: "streams"}, {Name: "max_streams"}, {Name: "chunk_size"},
	{Name: "queue_length"}, {Name: "client_agent"}, {Name: "server_agent"},
	{Name: "client_agents"}, {Name: "server_agents"},
}}

var spreadSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{{Name: "mode"}, {Name: "bits"}}}

func decodeSpread(b *hcl.Block, diags *hcl.Diagnostics) Spread {
	a, _ := newAttrs(b.Body, spreadSchema, diags)
	sp := Spread{
		Mode:      a.str("mode", string(spread.ModePort)),
		Bits:      int(a.integer("bits", 0, 0, spread.MaxBits)),
		Range:     b.DefRange,
		ModeRange: a.rng("mode"),
	}
	if sp.Mode != string(spread.ModePort) && sp.Mode != string(spread.ModeAddress) {
		a.errorf("mode", "spread mode %q is neither %q nor %q", fmt.Sprintf(`%q spreads the connections of each client over the agents by bits of its TCP port (needs masked tcp_src/tcp_dst matches, as Open vSwitch has); %q by the low bits of its address (plain OpenFlow 1.3, but one client's connections all use one agent).`, spread.ModePort, spread.ModeAddress), sp.Mode, spread.ModePort, spread.ModeAddress)
		sp.Mode = string(spread.ModePort)
	}
	return sp
}

func decodeWhitelist(b *hcl.Block, diags *hcl.Diagnostics) *Whitelist {
	a, _ := newAttrs(b.Body, whitelistSchema, diags)
	w := &Whitelist{
		Name:         b.Labels[0],
		Direction:    a.str("direction", DirectionClient),
		ChunkSize:    int(a.byteSize("chunk_size", DefaultChunkSize, 512, MaxChunkSize)),
		QueueLength:  int(a.integer("queue_length", DefaultQueueLength, 0, 1024)),
		ClientAgent:  a.str("client_agent", ""),
		ServerAgent:  a.str("server_agent", ""),
		ClientAgents: a.strList("client_agents"),
		ServerAgents: a.strList("server_agents"),
		Range:        b.DefRange,
		ClientsRange: a.rng("clients"),
		StreamsRange: a.rng("streams"),
	}
	decodeStreams(a, w)
	for _, name := range []string{"client_agent", "client_agents", "server_agent", "server_agents"} {
		if a.has(name) {
			if w.AgentRanges == nil {
				w.AgentRanges = map[string]hcl.Range{}
			}
			w.AgentRanges[name] = a.rng(name)
		}
	}
	for _, pair := range [][2]string{{"client_agent", "client_agents"}, {"server_agent", "server_agents"}} {
		if a.has(pair[0]) && a.has(pair[1]) {
			a.errorf(pair[1], "whitelist %q sets both %s and %s", fmt.Sprintf("Keep one: %s names one agent, %s a subset of the site's agents.", pair[0], pair[1]), w.Name, pair[0], pair[1])
		}
	}
	for _, c := range a.strList("clients") {
		p, err := ParsePrefix(c)
		if err != nil {
			a.errorf("clients", "whitelist %q clients: %v", `List client networks in CIDR form, e.g. "10.10.1.0/24".`, w.Name, err)
			w.clientsUnread = true
			continue
		}
		w.Clients = append(w.Clients, p)
	}
	for _, o := range overlapping(w.Clients) {
		a.errorf("clients", "whitelist %q clients: %s overlaps %s", "List each network once; drop the one inside the other.", w.Name, o[1], o[0])
	}
	w.clientsUnread = w.clientsUnread || a.bad["clients"]
	if w.Direction != DirectionClient && w.Direction != DirectionBoth {
		a.errorf("direction", "whitelist %q: direction must be %q or %q", fmt.Sprintf(`%q (the default) carries connections that clients open; %q also those that servers open toward clients, such as GridFTP downloads in mode E.`, DirectionClient, DirectionBoth), w.Name, DirectionClient, DirectionBoth)
		w.Direction = DirectionClient
	}
	decodeServers(a, w)
	decodePorts(a, w, diags)
	if len(w.Servers) == 1 && w.Servers[0].IsSingleIP() && len(w.Ports) == 1 && w.Ports[0].Lo == w.Ports[0].Hi {
		w.Server, w.ServerPort = w.Servers[0].Addr(), w.Ports[0].Lo
	}
	return w
}

// decodeStreams reads streams, a count or "auto", and max_streams, the
// most streams an auto session may open (only with "auto").
func decodeStreams(a *attrs, w *Whitelist) {
	w.Streams = DefaultStreams
	if a.has("streams") {
		v, d := a.m["streams"].Expr.Value(nil)
		switch {
		case d.HasErrors():
			*a.diags = append(*a.diags, d...)
		case v.Type() == cty.String && v.IsKnown() && !v.IsNull():
			if v.AsString() != StreamsAuto {
				a.errorf("streams", "whitelist %q: streams must be a number or %q, not %q", fmt.Sprintf(`Write streams = 16 for a fixed count, or streams = %q to let each session open streams while they raise its rate, up to max_streams.`, StreamsAuto), w.Name, StreamsAuto, v.AsString())
				break
			}
			w.AutoStreams = true
		default:
			w.Streams = int(a.integer("streams", DefaultStreams, 1, 1<<16))
		}
	}
	if !a.has("max_streams") {
		if w.AutoStreams {
			w.Streams = DefaultAutoMaxStreams
		}
		return
	}
	w.MaxStreamsRange = a.rng("max_streams")
	n := int(a.integer("max_streams", DefaultAutoMaxStreams, 1, 1<<16))
	if !w.AutoStreams {
		a.errorf("max_streams", "whitelist %q sets max_streams without streams = %q", fmt.Sprintf(`max_streams bounds the stream count a session chooses itself; with a fixed count, streams alone says how many. Write streams = %q, or drop max_streams.`, StreamsAuto), w.Name, StreamsAuto)
		return
	}
	w.Streams = n
}

// decodeServers reads server (one address) or servers (prefixes or
// addresses), exactly one of them.
func decodeServers(a *attrs, w *Whitelist) {
	switch {
	case a.has("server") && a.has("servers"):
		a.errorf("servers", "whitelist %q has both server and servers", `Keep one: server = "10.10.2.1" for one host, servers = ["10.10.2.0/28"] for several.`, w.Name)
		return
	case a.has("server"):
		w.ServerRange = a.rng("server")
		v := a.str("server", "")
		addr, err := ParseAddr(v)
		if err != nil {
			a.errorf("server", "whitelist %q server: %v", `Write the server's address, e.g. "10.10.2.1"; use servers = [...] for prefixes.`, w.Name, err)
			return
		}
		w.Servers = []netip.Prefix{netip.PrefixFrom(addr, addr.BitLen())}
	case a.has("servers"):
		w.ServerRange = a.rng("servers")
		list := a.strList("servers")
		before := len(*a.diags)
		for _, v := range list {
			p, err := ParsePrefix(v)
			if err != nil {
				a.errorf("servers", "whitelist %q servers: %v", `List server hosts or networks, e.g. ["10.10.2.1", "10.10.2.16/28"].`, w.Name, err)
				continue
			}
			w.Servers = append(w.Servers, p)
		}
		for _, o := range overlapping(w.Servers) {
			a.errorf("servers", "whitelist %q servers: %s overlaps %s", "List each server or network once; drop the one inside the other.", w.Name, o[1], o[0])
		}
		if len(list) == 0 && len(*a.diags) == before {
			a.errorf("servers", "whitelist %q servers is empty", "List at least one server address or prefix.", w.Name)
		}
	default:
		*a.diags = append(*a.diags, diagAt(w.Range, fmt.Sprintf("Whitelist %q names no server", w.Name),
			`Add server = "10.10.2.1" for one host, or servers = ["10.10.2.0/28"] for several.`))
	}
}

// overlapping returns, for each prefix of ps inside another (or equal to
// one), that pair, the wider (or first) one first: one pair per prefix,
// found in n log n (prefixes either nest or are disjoint, so in the order
// of their first address, widest first, one overlaps an earlier one
// exactly when it starts within the widest one before it that it does
// not follow).
func overlapping(ps []netip.Prefix) [][2]netip.Prefix {
	sorted := slices.Clone(ps)
	slices.SortStableFunc(sorted, func(a, b netip.Prefix) int {
		if c := a.Masked().Addr().Compare(b.Masked().Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	var out [][2]netip.Prefix
	var outer netip.Prefix
	for _, p := range sorted {
		if outer.IsValid() && outer.Overlaps(p) {
			out = append(out, [2]netip.Prefix{outer, p})
			continue
		}
		outer = p
	}
	return out
}

// overlappingPorts returns, for each range of rs that overlaps one before
// it in the order of their first port (the list's order among equal
// starts), that pair, the earlier one first: one pair per range, found in
// n log n. Each range is paired with the one reaching furthest before it,
// which it overlaps whenever it overlaps any.
func overlappingPorts(rs []portrange.Range) [][2]portrange.Range {
	sorted := slices.Clone(rs)
	slices.SortStableFunc(sorted, func(a, b portrange.Range) int { return cmp.Compare(a.Lo, b.Lo) })
	var out [][2]portrange.Range
	var reach portrange.Range
	for i, r := range sorted {
		if i > 0 && r.Lo <= reach.Hi {
			out = append(out, [2]portrange.Range{reach, r})
		}
		if i == 0 || r.Hi > reach.Hi {
			reach = r
		}
	}
	return out
}

// rangeLike says whether a quoted server_port holds a range or a list
// rather than a number, which may be signed ("-1" is a number out of
// range, not a range).
func rangeLike(s string) bool {
	if s == "" || s[0] == '-' || s[0] == '+' {
		return false
	}
	return strings.ContainsAny(s, "-:, ") || strings.Contains(s, "..")
}

var rangeSpaces = regexp.MustCompile(`\s*(-|:|\.\.)\s*`)

// portList is s, a list of ports and ranges separated by commas or
// spaces (ranges in other tools' spellings, 5000:6000, taken), written as
// server_ports' list, or why one of them is not a port or a range.
func portList(s string) (string, error) {
	// "5201 - 5204" is one range: close the spaces around its dash.
	s = rangeSpaces.ReplaceAllString(s, "$1")
	var list []string
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		r, err := portrange.Parse(strings.NewReplacer("..", "-", ":", "-").Replace(f))
		if err != nil {
			return "", err
		}
		list = append(list, strconv.Quote(r.String()))
	}
	if len(list) == 0 {
		return "", errors.New("no port in it")
	}
	return strings.Join(list, ", "), nil
}

// decodePorts reads server_port (one port) or server_ports (ports and
// ranges such as "50000-51000"); without either the whitelist covers every
// port, which validate warns about.
func decodePorts(a *attrs, w *Whitelist, diags *hcl.Diagnostics) {
	switch {
	case a.has("server_port") && a.has("server_ports"):
		a.errorf("server_ports", "whitelist %q has both server_port and server_ports", `Keep one: server_port = 5201, or server_ports = ["5201", "50000-51000"].`, w.Name)
	case a.has("server_port"):
		w.PortsRange = a.rng("server_port")
		if v, d := a.m["server_port"].Expr.Value(nil); !d.HasErrors() && v.Type() == cty.String && v.IsKnown() && !v.IsNull() {
			if s := strings.TrimSpace(v.AsString()); rangeLike(s) {
				hint := `For ports and ranges write server_ports = ["5201", "50000-51000"].`
				if list, err := portList(s); err == nil {
					hint = fmt.Sprintf("For a range or several ports write server_ports = [%s].", list)
				} else {
					hint = fmt.Sprintf("%s (%v)", hint, err)
				}
				a.errorf("server_port", "whitelist %q server_port is one port, not %q", hint, w.Name, s)
				return
			}
		}
		if p := uint16(a.integer("server_port", 0, 1, 65535)); p != 0 {
			w.Ports = []portrange.Range{portrange.Single(p)}
		}
	case a.has("server_ports"):
		w.PortsRange = a.rng("server_ports")
		list := a.strList("server_ports")
		before := len(*diags)
		var ports []portrange.Range
		for _, v := range list {
			r, err := portrange.Parse(v)
			if err != nil {
				a.errorf("server_ports", "whitelist %q server_ports: %v", `List ports and ranges of the listening side, e.g. ["5201", "50000-51000"].`, w.Name, err)
				continue
			}
			ports = append(ports, r)
		}
		for _, o := range overlappingPorts(ports) {
			a.errorf("server_ports", "whitelist %q server_ports: %s overlaps %s", "List each port once; merge the two into one range.", w.Name, o[1], o[0])
		}
		if len(list) == 0 && len(*diags) == before {
			a.errorf("server_ports", "whitelist %q server_ports is empty", `List at least one port, or remove server_ports to accelerate every port.`, w.Name)
		}
		w.Ports = portrange.Normalize(ports)
	default:
		w.Ports, w.AllPorts = []portrange.Range{portrange.All}, true
	}
}

var tuningSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "base"}, {Name: "sysctl"}, {Name: "relay_cpus"}, {Name: "congestion_control"}, {Name: "socket_buffer"},
	},
	Blocks: []hcl.BlockHeaderSchema{{Type: "interface", LabelNames: []string{"name"}}},
}

func decodeTuning(b *hcl.Block, diags *hcl.Diagnostics) *Tuning {
	a, blocks := newAttrs(b.Body, tuningSchema, diags)
	t := &Tuning{
		Name:              b.Labels[0],
		Sysctl:            map[string]string{},
		SysctlRanges:      map[string]hcl.Range{},
		SysctlOrigins:     map[string]Origin{},
		CongestionControl: a.str("congestion_control", ""),
		SocketBuffer:      a.byteSize("socket_buffer", 0, 4096, 1<<31-1),
		Range:             b.DefRange,
	}
	if a.has("sysctl") {
		decodeSysctl(a.m["sysctl"], t, diags)
	}
	if v, ok := a.given("relay_cpus"); ok {
		cpus, err := ParseCPUList(v)
		if err != nil {
			a.errorf("relay_cpus", "tuning %q relay_cpus: %v", `Write CPUs as a list such as "13" or "0-3,8".`, t.Name, err)
		} else if len(cpus) > 0 && cpus[len(cpus)-1] >= agentspec.MaxRelayCPUs {
			a.errorf("relay_cpus", "tuning %q relay_cpus: CPU %d is beyond those the relay can pin itself to (0-%d)",
				"Name CPUs this node has; `nproc --all` counts them.", t.Name, cpus[len(cpus)-1], agentspec.MaxRelayCPUs-1)
		}
		t.RelayCPUs, t.RelayCPUsRange = cpus, a.rng("relay_cpus")
	}
	if t.CongestionControl != "" && !validCongestionName(t.CongestionControl) {
		a.errorf("congestion_control", "tuning %q: %q is not a congestion control name", `Use a kernel name such as "htcp", "cubic" or "bbr".`, t.Name, t.CongestionControl)
	}
	seen := map[string]hcl.Range{}
	for _, blk := range blocks {
		it := decodeInterfaceTuning(blk, diags)
		if prev, dup := seen[it.Name]; dup {
			*diags = append(*diags, diagAt(blk.DefRange, fmt.Sprintf("Duplicate interface %q in tuning %q", it.Name, t.Name),
				fmt.Sprintf("Merge it with the block at %s.", prev)))
			continue
		}
		seen[it.Name] = blk.DefRange
		t.Interfaces = append(t.Interfaces, it)
	}
	// A base that is not a string was reported by value already.
	if v, ok := a.value("base", cty.String, "a string"); ok {
		t.Base, t.BaseRange = v.AsString(), a.rng("base")
		if p, ok := profiles.Lookup(t.Base); ok {
			applyBase(t, p)
		} else {
			a.errorf("base", "tuning %q: unknown base profile %q",
				fmt.Sprintf("The built-in profiles are %s.%s", strings.Join(profiles.Names(), ", "), didYouMean(t.Base, profiles.Names())),
				t.Name, t.Base)
		}
	}
	return t
}

// applyBase fills in the profile's values for every key the block leaves
// out: a key the file sets overrides the profile's value for it.
func applyBase(t *Tuning, p profiles.Profile) {
	from := func(source string, optional bool) Origin {
		return Origin{Profile: p.Name, Range: t.BaseRange, Source: source, Optional: optional}
	}
	for _, s := range p.Sysctls {
		if _, set := t.Sysctl[s.Key]; set {
			continue
		}
		t.Sysctl[s.Key] = s.Value
		t.SysctlOrigins[s.Key] = from(s.Source, s.Optional)
	}
	for _, it := range t.Interfaces {
		if p.MTU > 0 && it.MTU == 0 {
			it.MTU, it.MTUOrigin = p.MTU, from(p.MTUSource, false)
		}
		if p.TxQueueLen > 0 && it.TxQueueLen < 0 {
			it.TxQueueLen, it.TxQueueLenOrigin = p.TxQueueLen, from(p.TxQueueLenSource, false)
		}
	}
	t.Notes = p.Notes
}

func validCongestionName(s string) bool {
	if s == "" || len(s) > 15 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			return false
		}
	}
	return true
}

// decodeSysctl walks the map expression item by item so that each bad key
// or value is reported on its own line.
func decodeSysctl(at *hcl.Attribute, t *Tuning, diags *hcl.Diagnostics) {
	pairs, d := hcl.ExprMap(at.Expr)
	if d.HasErrors() {
		*diags = append(*diags, diagAt(at.Expr.Range(), "sysctl must be a map",
			`Write sysctl = { "net.core.rmem_max" = "134217728" }.`))
		return
	}
	for _, kv := range pairs {
		kval, kd := kv.Key.Value(nil)
		if kd.HasErrors() {
			// A bare identifier key such as net.core.rmem_max (unquoted dots)
			// fails to evaluate; say what to write instead.
			*diags = append(*diags, diagAt(kv.Key.Range(), "sysctl keys must be quoted strings",
				`Quote the key: "net.core.rmem_max" = "134217728".`))
			continue
		}
		if kval.Type() != cty.String || kval.IsNull() {
			*diags = append(*diags, diagAt(kv.Key.Range(), "sysctl keys must be quoted strings", `Quote the key.`))
			continue
		}
		key := kval.AsString()
		if !validSysctlName(key) {
			*diags = append(*diags, diagAt(kv.Key.Range(), fmt.Sprintf("%q is not a sysctl name", key),
				"Use the dotted name from `sysctl -a`, e.g. \"net.ipv4.tcp_rmem\"."))
			continue
		}
		if _, dup := t.Sysctl[key]; dup {
			*diags = append(*diags, diagAt(kv.Key.Range(), fmt.Sprintf("Duplicate sysctl %q in tuning %q", key, t.Name),
				"Keep one value per key."))
			continue
		}
		vval, vd := kv.Value.Value(nil)
		if vd.HasErrors() {
			*diags = append(*diags, vd...)
			continue
		}
		sv, err := convert.Convert(vval, cty.String)
		if err != nil || sv.IsNull() || !sv.IsKnown() {
			*diags = append(*diags, diagAt(kv.Value.Range(), fmt.Sprintf("sysctl %q must be a string or number", key),
				`Write the value as sysctl prints it, e.g. "4096 87380 67108864".`))
			continue
		}
		t.Sysctl[key] = strings.Join(strings.Fields(sv.AsString()), " ")
		t.SysctlRanges[key] = kv.Key.Range()
		t.SysctlOrigins[key] = fileOrigin(kv.Key.Range())
	}
}

var interfaceSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{
	{Name: "mtu"}, {Name: "txqueuelen"}, {Name: "irq_cpus"},
}}

func decodeInterfaceTuning(b *hcl.Block, diags *hcl.Diagnostics) *InterfaceTuning {
	a, _ := newAttrs(b.Body, interfaceSchema, diags)
	it := &InterfaceTuning{
		Name:       b.Labels[0],
		MTU:        int(a.integer("mtu", 0, 68, 65535)),
		TxQueueLen: int(a.integer("txqueuelen", -1, 0, 1<<20)),
		Range:      b.DefRange,

		MTUOrigin:        fileOrigin(a.rng("mtu")),
		TxQueueLenOrigin: fileOrigin(a.rng("txqueuelen")),
		IRQOrigin:        fileOrigin(a.rng("irq_cpus")),
	}
	if !validInterfaceName(it.Name) {
		*diags = append(*diags, diagAt(b.LabelRanges[0], fmt.Sprintf("%q is not a network interface name", it.Name),
			"Interface names are 1-15 characters without spaces, '/' or ':'."))
	}
	if v, ok := a.given("irq_cpus"); ok {
		cpus, err := ParseCPUList(v)
		if err != nil {
			a.errorf("irq_cpus", "interface %q irq_cpus: %v", `Write CPUs as a list such as "0-12" or "0-3,8".`, it.Name, err)
		}
		it.IRQCPUs = cpus
	}
	return it
}

var nodeSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{{Name: "tuning", Required: true}}}

func decodeNode(b *hcl.Block, diags *hcl.Diagnostics) *Node {
	a, _ := newAttrs(b.Body, nodeSchema, diags)
	return &Node{Name: b.Labels[0], Tuning: a.strList("tuning"), Range: b.DefRange, TuningRange: a.rng("tuning")}
}

// sortedKeys returns map keys in order, so diagnostics come out stable.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
