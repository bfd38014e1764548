package config

import (
	"cmp"
	"fmt"
	"math/bits"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"unicode"

	"github.com/hashicorp/hcl/v2"

	"github.com/sosappliance/sosappliance/dataplane/stripe"
	"github.com/sosappliance/sosappliance/internal/portrange"
	"github.com/sosappliance/sosappliance/sdn/spread"
)

// validate runs the checks that need the whole file: names, references and
// the relations between sites, agents and whitelists.
func validate(cfg *Config, body hcl.Body) hcl.Diagnostics {
	var diags hcl.Diagnostics
	add := func(rng hcl.Range, hint, format string, args ...any) {
		diags = append(diags, diagAt(rng, fmt.Sprintf(format, args...), hint))
	}

	names := func(kind string, items []named) {
		seen := map[string]hcl.Range{}
		for _, it := range items {
			if prev, dup := seen[it.name]; dup {
				add(it.rng, fmt.Sprintf("Rename one; the first %s %q is at %s.", kind, it.name, prev), "Duplicate %s name %q", kind, it.name)
				continue
			}
			seen[it.name] = it.rng
		}
	}
	var sites, switches, agents, whitelists, tunings, nodes []named
	for _, s := range cfg.Sites {
		sites = append(sites, named{s.Name, s.Range})
		for _, sw := range s.Switches {
			switches = append(switches, named{sw.Name, sw.Range})
		}
		for _, a := range s.Agents {
			agents = append(agents, named{a.Name, a.Range})
			// The name is the agent's identity in every stream handshake.
			if a.Name == "" || len(a.Name) > stripe.MaxNameSize || strings.ContainsFunc(a.Name, unicode.IsControl) {
				add(a.Range, fmt.Sprintf("Agents name themselves in every stream handshake, in 1 to %d bytes without control characters.", stripe.MaxNameSize),
					"Agent name %q is not a valid handshake identity", a.Name)
			}
		}
	}
	for _, w := range cfg.Whitelists {
		whitelists = append(whitelists, named{w.Name, w.Range})
	}
	for _, t := range cfg.Tunings {
		tunings = append(tunings, named{t.Name, t.Range})
	}
	for _, n := range cfg.Nodes {
		nodes = append(nodes, named{n.Name, n.Range})
	}
	names("site", sites)
	names("switch", switches)
	names("agent", agents)
	names("whitelist", whitelists)
	names("tuning", tunings)
	names("node", nodes)

	if len(cfg.Sites) == 0 {
		add(fileStart(body), "Declare each location with site \"name\" { prefixes = [...] }.", "No site declared")
	}

	// Site prefixes must not overlap, or an address would belong to two sites.
	for i, s := range cfg.Sites {
		for _, t := range cfg.Sites[:i] {
			for _, p := range s.Prefixes {
				for _, q := range t.Prefixes {
					if p.Overlaps(q) {
						add(s.PrefixesRange, "Each address must belong to exactly one site.",
							"Site %q prefix %s overlaps site %q prefix %s", s.Name, p, t.Name, q)
					}
				}
			}
		}
	}

	// Switches: unique datapath ids.
	dpids := map[uint64]*Switch{}
	anySwitch := false
	for _, s := range cfg.Sites {
		for _, sw := range s.Switches {
			anySwitch = true
			if prev, dup := dpids[sw.DatapathID]; dup && sw.DatapathID != 0 {
				add(sw.Range, fmt.Sprintf("Each switch has its own datapath id; %q uses it too.", prev.Name),
					"Switch %q repeats datapath id %s", sw.Name, FormatDatapathID(sw.DatapathID))
				continue
			}
			dpids[sw.DatapathID] = sw
		}
	}
	if anySwitch && cfg.Controller == nil {
		add(fileStart(body), `Add controller { node = "<hostname>" } to say which node runs the OpenFlow controller.`,
			"Switches are declared but there is no controller block")
	}
	validateSwitchTLS(cfg, add)
	validateHealthAllow(cfg, add)
	validateAgentKeys(cfg, add)
	validatePools(cfg, add)
	validateCluster(cfg, add)

	// Agents: switch reference, one agent per switch port, tuning references.
	type portKey struct {
		sw   string
		port uint32
	}
	ports := map[portKey]*Agent{}
	byNode := map[string]*Agent{}
	byMAC := map[string]*Agent{}
	byAddr := map[netip.Addr]*Agent{}
	for _, s := range cfg.Sites {
		for _, a := range s.Agents {
			if prev, dup := byNode[a.Node]; dup && a.Node != "" {
				add(a.Range, fmt.Sprintf("Agent %q already runs on node %q; a node owns one agent's steering table and listeners.", prev.Name, a.Node),
					"Node %q runs two agents", a.Node)
			} else {
				byNode[a.Node] = a
			}
			if prev, dup := byMAC[a.MAC.String()]; dup && len(a.MAC) > 0 {
				add(a.Range, fmt.Sprintf("Agent %q already has MAC %s; steering rewrites the destination MAC to the agent's, so each agent needs its own.", prev.Name, a.MAC),
					"Agents %q and %q share MAC %s", prev.Name, a.Name, a.MAC)
			} else if len(a.MAC) > 0 {
				byMAC[a.MAC.String()] = a
			}
			if prev, dup := byAddr[a.Address]; dup && a.Address.IsValid() {
				add(a.Range, fmt.Sprintf("Agent %q already has address %s; peers dial each agent at its own address.", prev.Name, a.Address),
					"Agents %q and %q share address %s", prev.Name, a.Name, a.Address)
			} else if a.Address.IsValid() {
				byAddr[a.Address] = a
			}
			sw := cfg.Switch(a.Switch)
			switch {
			case a.Switch == "":
			case sw == nil:
				add(a.SwitchRange, fmt.Sprintf("Declare switch %q in site %q, or fix the name.%s", a.Switch, s.Name, didYouMean(a.Switch, switchNames(s))),
					"Agent %q refers to unknown switch %q", a.Name, a.Switch)
			case sw.Site != s.Name:
				add(a.SwitchRange, fmt.Sprintf("An agent attaches to a switch of its own site; %q is in site %q.", a.Switch, sw.Site),
					"Agent %q in site %q uses switch %q of another site", a.Name, s.Name, a.Switch)
			}
			if a.SwitchPort != 0 {
				k := portKey{a.Switch, a.SwitchPort}
				if prev, dup := ports[k]; dup {
					add(a.SwitchPortRange, fmt.Sprintf("Agent %q already uses port %d of %q; each agent needs its own port.", prev.Name, a.SwitchPort, a.Switch),
						"Two agents on switch %q port %d", a.Switch, a.SwitchPort)
				} else {
					ports[k] = a
				}
			}
			diags = append(diags, checkTuningRefs(cfg, a.Tuning, a.TuningRange, fmt.Sprintf("agent %q", a.Name))...)
		}
	}
	for _, n := range cfg.Nodes {
		diags = append(diags, checkTuningRefs(cfg, n.Tuning, n.TuningRange, fmt.Sprintf("node %q", n.Name))...)
	}

	// Whitelists: sites, agents, overlaps, flows and memory.
	for i, w := range cfg.Whitelists {
		diags = append(diags, resolveWhitelist(cfg, w)...)
		for _, v := range cfg.Whitelists[:i] {
			if why, ok := whitelistsOverlap(w, v); ok {
				add(w.ClientsRange, fmt.Sprintf("A connection must match one whitelist only; narrow the clients, servers or ports, or merge with %q.", v.Name),
					"Whitelist %q overlaps whitelist %q: %s", w.Name, v.Name, why)
			}
		}
		diags = append(diags, checkFlowCount(cfg, w)...)
		for _, group := range [][]string{w.ClientAgents, w.ServerAgents} {
			if len(group) < 2 {
				continue
			}
			// A whitelist resolveWhitelist could not resolve (its clients
			// in no site, say: reported) keeps the names as written,
			// which may name no agent.
			first := cfg.Agent(group[0])
			if first == nil {
				continue
			}
			for _, name := range group[1:] {
				if a := cfg.Agent(name); a != nil && a.Switch != first.Switch {
					add(w.Range, "The switch deals a site's connections to its agents by output port; put the agents of one whitelist on one switch, or name a subset with client_agents/server_agents.",
						"Whitelist %q spreads over agents %q and %q on different switches", w.Name, first.Name, a.Name)
				}
			}
			// Fewer buckets than the whitelist deals to agents: the last
			// get none, and never a connection of it.
			if b := cfg.Spread.Bits; b > 0 && len(group) > 1<<b {
				add(cfg.Spread.Range, fmt.Sprintf("Give bits = %d or more, or leave bits out: the default deals every agent at least eight buckets.", bits.Len(uint(len(group)-1))),
					"spread bits = %d deals %d buckets, but whitelist %q spreads over %d agents: %s would never get a connection of it",
					b, 1<<b, w.Name, len(group), strings.Join(group[1<<b:], ", "))
			}
			if sw := cfg.Switch(first.Switch); sw != nil && !sw.PortMasks && cfg.Spread.Mode == string(spread.ModePort) {
				add(w.Range, `spread { mode = "port" } matches bits of the client's TCP port under a mask; on this switch use mode = "address", or name one agent.`,
					"Whitelist %q spreads by TCP port, but switch %q has no masked port matches", w.Name, sw.Name)
			}
		}
		if cfg.Spread.Mode == string(spread.ModeAddress) && (len(w.ClientAgents) > 1 || len(w.ServerAgents) > 1) {
			rng := cfg.Spread.ModeRange
			if rng.Filename == "" {
				rng = w.Range
			}
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagWarning,
				Summary: fmt.Sprintf("Whitelist %q spreads by client address: all connections of one client land on one agent", w.Name),
				Detail:  `spread { mode = "address" } is even only across many clients; with few clients, mode = "port" spreads each client's connections too (needs masked TCP port matches, as Open vSwitch has).`,
				Subject: rng.Ptr()})
		}
		if w.AllPorts {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagWarning,
				Summary: fmt.Sprintf("Whitelist %q lists no ports: it carries TCP on every port between its clients and servers", w.Name),
				Detail:  `Name the listening ports with server_ports = ["5201", "50000-51000"] unless every connection between these hosts should cross the agents.`,
				Subject: w.Range.Ptr()})
		}
		streamsRange := w.StreamsRange
		if w.AutoStreams && w.MaxStreamsRange.Filename != "" {
			streamsRange = w.MaxStreamsRange
		}
		switch {
		case w.Streams <= cfg.Limits.MaxStreams:
		case w.AutoStreams && w.MaxStreamsRange.Filename == "":
			// The default max_streams keeps within the node's limit.
			w.Streams = cfg.Limits.MaxStreams
		case w.AutoStreams:
			add(streamsRange, fmt.Sprintf("Lower the whitelist's max_streams (the default under streams = \"auto\" is %d) or raise limits.max_streams (now %d).", DefaultAutoMaxStreams, cfg.Limits.MaxStreams),
				"Whitelist %q lets a session open up to %d streams, more than limits.max_streams %d", w.Name, w.Streams, cfg.Limits.MaxStreams)
		default:
			add(streamsRange, fmt.Sprintf("Lower streams or raise limits.max_streams (now %d).", cfg.Limits.MaxStreams),
				"Whitelist %q asks for %d streams, more than max_streams %d", w.Name, w.Streams, cfg.Limits.MaxStreams)
		}
		if mem := w.SessionMemory(); mem > cfg.Limits.SessionMemory {
			rng := streamsRange
			if rng.Filename == "" {
				rng = w.Range
			}
			add(rng, fmt.Sprintf("%d streams of %d-byte chunks need %d bytes of buffers to start (a receive window of at least one chunk per stream and 4 MiB); lower streams or chunk_size, or raise limits.session_memory (now %d).", w.Streams, w.ChunkSize, mem, cfg.Limits.SessionMemory),
				"Whitelist %q needs more memory per session than the cap allows", w.Name)
		} else if cfg.Limits.Memory > 0 && mem > cfg.Limits.Memory {
			add(cfg.Limits.Range, fmt.Sprintf("One session of whitelist %q needs %d bytes; raise limits.memory (now %d) or shrink the whitelist.", w.Name, mem, cfg.Limits.Memory),
				"limits.memory cannot hold one session of whitelist %q", w.Name)
		}
	}
	return diags
}

type named struct {
	name string
	rng  hcl.Range
}

func checkTuningRefs(cfg *Config, refs []string, rng hcl.Range, owner string) hcl.Diagnostics {
	var diags hcl.Diagnostics
	var known []string
	for _, t := range cfg.Tunings {
		known = append(known, t.Name)
	}
	for _, ref := range refs {
		if cfg.Tuning(ref) == nil {
			diags = append(diags, diagAt(rng, fmt.Sprintf("%s refers to unknown tuning %q", capitalize(owner), ref),
				fmt.Sprintf("Declare tuning %q { ... }, or fix the name.%s", ref, didYouMean(ref, known))))
		}
	}
	return diags
}

func resolveWhitelist(cfg *Config, w *Whitelist) hcl.Diagnostics {
	var diags hcl.Diagnostics
	add := func(rng hcl.Range, hint, format string, args ...any) {
		diags = append(diags, diagAt(rng, fmt.Sprintf(format, args...), hint))
	}
	if len(w.Clients) == 0 && w.ClientsRange.Filename != "" && !w.clientsUnread {
		add(w.ClientsRange, "List at least one client network.", "Whitelist %q has no clients", w.Name)
	}
	// A TCP connection has one address family: IPv4 and IPv6 hosts of a
	// dual-stack pair take one whitelist each.
	for _, c := range w.Clients {
		if i := slices.IndexFunc(w.Servers, func(s netip.Prefix) bool { return s.Addr().Is4() != c.Addr().Is4() }); i >= 0 {
			add(w.ServerRange, "Split the whitelist: one for the IPv4 addresses of clients and servers, one for the IPv6 ones.",
				"Whitelist %q mixes address families: client %s and server %s", w.Name, serverText(c), serverText(w.Servers[i]))
			return diags
		}
	}
	for _, s := range cfg.Sites {
		if s.incomplete {
			// The site's own diagnostic says what to fix first.
			return diags
		}
	}
	var clientSite *Site
	for _, p := range w.Clients {
		s := siteContaining(cfg, p)
		if s == nil {
			add(w.ClientsRange, "Clients must lie inside one site's prefixes so sosappliance knows which agent serves them.",
				"Whitelist %q clients %s are in no site", w.Name, p)
			continue
		}
		if clientSite != nil && s != clientSite {
			add(w.ClientsRange, "Split the whitelist: one per client site.",
				"Whitelist %q has clients in two sites, %q and %q", w.Name, clientSite.Name, s.Name)
			continue
		}
		clientSite = s
	}
	var serverSite *Site
	for _, p := range w.Servers {
		s := siteContaining(cfg, p)
		if s == nil {
			add(w.ServerRange, "Servers must lie inside a site's prefixes so sosappliance knows which agent serves them.",
				"Whitelist %q server %s is in no site", w.Name, serverText(p))
			continue
		}
		if serverSite != nil && s != serverSite {
			add(w.ServerRange, "Split the whitelist: one per server site.",
				"Whitelist %q has servers in two sites, %q and %q", w.Name, serverSite.Name, s.Name)
			continue
		}
		serverSite = s
	}
	if clientSite != nil && clientSite == serverSite {
		add(w.ServerRange, "Acceleration is for traffic between sites; this pair never crosses the WAN.",
			"Whitelist %q has clients and server in the same site %q", w.Name, clientSite.Name)
		return diags
	}
	if clientSite != nil {
		w.ClientSite = clientSite.Name
		w.ClientAgents = pickAgents(cfg, w, clientSite, w.ClientAgent, w.ClientAgents, "client_agents", &diags)
		w.ClientAgent = first(w.ClientAgents)
	}
	if serverSite != nil {
		w.ServerSite = serverSite.Name
		w.ServerAgents = pickAgents(cfg, w, serverSite, w.ServerAgent, w.ServerAgents, "server_agents", &diags)
		w.ServerAgent = first(w.ServerAgents)
	}
	return diags
}

func siteContaining(cfg *Config, p netip.Prefix) *Site {
	for _, s := range cfg.Sites {
		for _, q := range s.Prefixes {
			if q.Bits() <= p.Bits() && q.Contains(p.Addr()) {
				return s
			}
		}
	}
	return nil
}

// pickAgents resolves the agents of one site that carry a whitelist: the
// named subset (client_agents/server_agents, or the one agent of
// client_agent/server_agent), or every agent of the site, always in the
// site's declaration order so that every node deals buckets alike.
func pickAgents(cfg *Config, w *Whitelist, site *Site, one string, subset []string, attr string, diags *hcl.Diagnostics) []string {
	if len(site.Agents) == 0 {
		*diags = append(*diags, diagAt(w.Range, fmt.Sprintf("Site %q has no agent to carry whitelist %q", site.Name, w.Name),
			fmt.Sprintf("Declare an agent in site %q.", site.Name)))
		return nil
	}
	chosen := subset
	if one != "" {
		chosen = []string{one}
		attr = strings.TrimSuffix(attr, "s")
	}
	at := w.Range // the argument's own line when it is set
	if r, ok := w.AgentRanges[attr]; ok {
		at = r
	}
	if len(chosen) == 0 {
		if subset != nil {
			*diags = append(*diags, diagAt(at, fmt.Sprintf("Whitelist %q %s is empty", w.Name, attr),
				fmt.Sprintf("Name at least one of: %s, or leave %s out to use them all.", strings.Join(agentNames(site), ", "), attr)))
			return nil
		}
		return agentNames(site)
	}
	want := map[string]bool{}
	ok := true
	for _, name := range chosen {
		a := cfg.Agent(name)
		if a == nil || a.Site != site.Name {
			*diags = append(*diags, diagAt(at, fmt.Sprintf("Whitelist %q %s %q is not an agent of site %q", w.Name, attr, name, site.Name),
				fmt.Sprintf("Name one of: %s.", strings.Join(agentNames(site), ", "))))
			ok = false
			continue
		}
		if want[name] {
			*diags = append(*diags, diagAt(at, fmt.Sprintf("Whitelist %q %s names agent %q twice", w.Name, attr, name),
				"Name each agent once."))
			ok = false
		}
		want[name] = true
	}
	if !ok {
		return nil
	}
	var out []string
	for _, a := range site.Agents {
		if want[a.Name] {
			out = append(out, a.Name)
		}
	}
	return out
}

func first(names []string) string {
	if len(names) == 0 {
		return ""
	}
	return names[0]
}

func agentNames(s *Site) []string {
	var out []string
	for _, a := range s.Agents {
		out = append(out, a.Name)
	}
	return out
}

func switchNames(s *Site) []string {
	var out []string
	for _, sw := range s.Switches {
		out = append(out, sw.Name)
	}
	return out
}

func didYouMean(name string, known []string) string {
	best := Closest(name, known)
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" Did you mean %q?", best)
}

// Closest is the name of known nearest to name, within two edits (a
// typo) and fewer than half its length plus one, or "": an empty or
// one-letter name is near everything short, and so names nothing.
func Closest(name string, known []string) string {
	best, bestDist := "", min(3, len(name)/2+1)
	for _, k := range known {
		if d := levenshtein(name, k); d < bestDist {
			best, bestDist = k, d
		}
	}
	return best
}

func levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// validateSwitchTLS resolves each switch's tls: written, or inherited from
// the controller's tls block for switches that connect to it.
func validateSwitchTLS(cfg *Config, add func(rng hcl.Range, hint, format string, args ...any)) {
	hasTLS := cfg.Controller != nil && cfg.Controller.TLS != nil
	for _, s := range cfg.Sites {
		for _, sw := range s.Switches {
			if !sw.tlsSet {
				sw.TLS = hasTLS && sw.Connect == ""
				if sw.TLSName != "" && !sw.TLS && sw.Connect == "" && cfg.Controller != nil {
					add(sw.TLSNameRange, `Add controller { tls { cert_file = "...", key_file = "...", ca_file = "..." } }, or remove tls_name.`,
						"Switch %q names its certificate (tls_name), but the controller has no tls block", sw.Name)
				}
				continue
			}
			if sw.TLSName != "" && !sw.TLS && sw.Connect == "" {
				add(sw.TLSNameRange, "A certificate name is checked only over TLS: set tls = true, or remove tls_name.",
					"Switch %q has tls_name but tls = false", sw.Name)
			}
			if sw.TLS && !hasTLS && cfg.Controller != nil {
				add(sw.TLSRange, `Add controller { tls { cert_file = "...", key_file = "...", ca_file = "..." } }, or set tls = false.`,
					"Switch %q requires TLS, but the controller has no tls block", sw.Name)
			}
		}
	}
}

// validateAgentKeys checks per-agent keys: every agent has a public_key
// or none does (an agent without one could not talk to those that have
// them), no two share one (a key copied to two agents lets each pass for
// the other), in any of its spellings (stripe.AgentKeyClass), and no
// key_file is the psk_file.
func validateAgentKeys(cfg *Config, add func(rng hcl.Range, hint, format string, args ...any)) {
	var with, without []*Agent
	seen := map[string]*Agent{}
	for _, s := range cfg.Sites {
		for _, ag := range s.Agents {
			if ag.PublicKey == nil {
				without = append(without, ag)
				continue
			}
			with = append(with, ag)
			if filepath.Clean(ag.KeyFile) == filepath.Clean(cfg.Security.PSKFile) {
				rng := ag.KeyFileRange
				if rng.Filename == "" {
					rng = ag.PublicKeyRange // key_file defaulted
				}
				add(rng, fmt.Sprintf("Give the agent's key a file of its own, e.g. key_file = %q.", DefaultAgentKeyFile),
					"Agent %q: key_file is the psk_file", ag.Name)
			}
			if len(ag.PublicKey) == 0 {
				continue // refused as it was decoded
			}
			class, err := stripe.AgentKeyClass(ag.PublicKey)
			if err != nil {
				continue // refused as it was decoded
			}
			if prev, dup := seen[string(class[:])]; dup {
				add(ag.PublicKeyRange, fmt.Sprintf("Run `sosappliance keygen` on each agent's node; agent %q has this key.", prev.Name),
					"Agent %q has the public_key of agent %q", ag.Name, prev.Name)
				continue
			}
			seen[string(class[:])] = ag
		}
	}
	if len(with) == 0 {
		return
	}
	for _, ag := range without {
		add(ag.Range, fmt.Sprintf("Per-agent keys are on for every agent or none (agent %q has a public_key): run `sosappliance keygen --out %s` on its node and add the public_key it prints.", with[0].Name, DefaultAgentKeyFile),
			"Agent %q has no public_key", ag.Name)
	}
}

// validateHealthAllow checks that an agent's health_allow admits the
// controllers on its own node: a controller probes a local agent from the
// address the agent listens on (the kernel's source for a local
// destination; loopback for an unspecified one, which the controller
// dials as it is), and an agent it cannot probe is taken for down.
func validateHealthAllow(cfg *Config, add func(rng hcl.Range, hint, format string, args ...any)) {
	for _, s := range cfg.Sites {
		for _, ag := range s.Agents {
			hp, err := netip.ParseAddrPort(ag.HealthListen)
			if len(ag.HealthAllow) == 0 || err != nil {
				continue
			}
			from := hp.Addr().Unmap().WithZone("")
			switch {
			case from == netip.IPv4Unspecified():
				from = netip.MustParseAddr("127.0.0.1") // the kernel's source for 0.0.0.0
			case from == netip.IPv6Unspecified():
				from = netip.IPv6Loopback()
			}
			if slices.ContainsFunc(ag.HealthAllow, func(p netip.Prefix) bool { return p.Contains(from) }) {
				continue
			}
			for _, c := range cfg.Controllers {
				if c.Node == ag.Node {
					add(ag.HealthAllowRange, fmt.Sprintf("Add %q to health_allow.", netip.PrefixFrom(from, from.BitLen())),
						"Agent %q health_allow does not admit %s, where the controller on its node %q probes it from", ag.Name, from, ag.Node)
					break
				}
			}
		}
	}
}

// serverText writes a one-host prefix as its address.
func serverText(p netip.Prefix) string {
	if p.IsSingleIP() {
		return p.Addr().String()
	}
	return p.String()
}

// whitelistEntry is one direction of a whitelist: connections from a host
// in from to a host in to on one of ports.
type whitelistEntry struct {
	from, to []netip.Prefix
	ports    []portrange.Range
}

func entries(w *Whitelist) []whitelistEntry {
	out := []whitelistEntry{{w.Clients, w.Servers, w.Ports}}
	if w.Both() {
		out = append(out, whitelistEntry{w.Servers, w.Clients, w.Ports})
	}
	return out
}

// whitelistsOverlap says which connection two whitelists would both claim:
// clients, servers and ports must all overlap, in either direction of a
// whitelist with direction = "both".
func whitelistsOverlap(w, v *Whitelist) (string, bool) {
	for i, a := range entries(w) {
		for _, b := range entries(v) {
			p, okP := firstOverlap(a.from, b.from)
			q, okQ := firstOverlap(a.to, b.to)
			r, okR := firstPortOverlap(a.ports, b.ports)
			if !okP || !okQ || !okR {
				continue
			}
			what := "clients"
			if i == 1 {
				what = "servers (direction both)"
			}
			return fmt.Sprintf("%s %s and %s to %s and %s on ports %s and %s", what, serverText(p[0]), serverText(p[1]),
				serverText(q[0]), serverText(q[1]), r[0], r[1]), true
		}
	}
	return "", false
}

// firstOverlap is a pair of overlapping prefixes, one of a and one of b,
// found in (n+m) log(n+m).
func firstOverlap(a, b []netip.Prefix) ([2]netip.Prefix, bool) {
	first := func(p netip.Prefix) netip.Addr { return p.Masked().Addr() }
	last := func(p netip.Prefix) netip.Addr {
		b := p.Masked().Addr().AsSlice()
		for k := max(p.Bits(), 0); k < len(b)*8; k++ {
			b[k/8] |= 0x80 >> (k % 8)
		}
		a, _ := netip.AddrFromSlice(b)
		return a
	}
	i, j, ok := firstIntervalOverlap(a, b, func(x, y netip.Prefix) int { return first(x).Compare(first(y)) },
		func(x, y netip.Prefix) bool { return last(x).Less(first(y)) })
	if !ok {
		return [2]netip.Prefix{}, false
	}
	return [2]netip.Prefix{i, j}, true
}

func firstPortOverlap(a, b []portrange.Range) ([2]portrange.Range, bool) {
	i, j, ok := firstIntervalOverlap(a, b, func(x, y portrange.Range) int { return cmp.Compare(x.Lo, y.Lo) },
		func(x, y portrange.Range) bool { return x.Hi < y.Lo })
	if !ok {
		return [2]portrange.Range{}, false
	}
	return [2]portrange.Range{i, j}, true
}

// firstIntervalOverlap finds an interval of a and one of b that overlap:
// both sorted by their start, the one that ends before the other starts
// is dropped, as nothing after the other can overlap it either. before(x,
// y) says that x ends before y starts.
func firstIntervalOverlap[T any](a, b []T, byStart func(x, y T) int, before func(x, y T) bool) (T, T, bool) {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.SortFunc(a, byStart)
	slices.SortFunc(b, byStart)
	for i, j := 0, 0; i < len(a) && j < len(b); {
		switch {
		case before(a[i], b[j]):
			i++
		case before(b[j], a[i]):
			j++
		default:
			return a[i], b[j], true
		}
	}
	var zero T
	return zero, zero, false
}

// MaxFlowsPerWhitelist bounds the steering flows one whitelist may put on
// one switch: beyond it a port range is wider than the switch can hold
// well (a switch without masked port matches needs one flow per port).
const MaxFlowsPerWhitelist = 4096

// FlowCount is how many steering flows one direction of the whitelist
// takes on a switch: one per client prefix, server prefix and port match,
// where a port match is a value/mask pair, or one port on a switch
// without masked port matches (port_masks = false).
func (w *Whitelist) FlowCount(portMasks bool) int {
	n := 0
	for _, r := range w.Ports {
		if portMasks {
			n += len(r.Masks())
		} else {
			n += r.Len()
		}
	}
	return len(w.Clients) * len(w.Servers) * n
}

// spreadPatterns is how many bucket patterns a side's agents take: 1
// without spreading.
func spreadPatterns(cfg *Config, agents []string) int {
	if len(agents) < 2 {
		return 1
	}
	b, err := spread.Assign(spread.Mode(cfg.Spread.Mode), cfg.SpreadBits(), len(agents), nil)
	if err != nil {
		return 1
	}
	n := 0
	for i := range agents {
		n += len(b.Matches(i))
	}
	return n
}

func checkFlowCount(cfg *Config, w *Whitelist) hcl.Diagnostics {
	var diags hcl.Diagnostics
	for i, name := range []string{w.ClientAgent, w.ServerAgent} {
		a := cfg.Agent(name)
		if a == nil {
			continue
		}
		sw := cfg.Switch(a.Switch)
		if sw == nil {
			continue
		}
		n := w.FlowCount(sw.PortMasks) * spreadPatterns(cfg, [][]string{w.ClientAgents, w.ServerAgents}[i])
		if w.Both() {
			n *= 2
		}
		if n <= MaxFlowsPerWhitelist {
			continue
		}
		how := fmt.Sprintf("%d port matches (value/mask pairs)", portrange.MaskCount(w.Ports))
		if !sw.PortMasks {
			ports := 0
			for _, r := range w.Ports {
				ports += r.Len()
			}
			how = fmt.Sprintf("%d ports: switch %q has port_masks = false, so each port takes its own flow", ports, sw.Name)
		}
		if w.Both() {
			how += ", in both directions"
		}
		rng := w.PortsRange
		if rng.Filename == "" {
			rng = w.Range
		}
		diags = append(diags, diagAt(rng, fmt.Sprintf("Whitelist %q compiles to %d flows on switch %q, more than %d", w.Name, n, sw.Name, MaxFlowsPerWhitelist),
			fmt.Sprintf("%d client prefix(es) x %d server prefix(es) x %s; narrow the ranges or split the whitelist.", len(w.Clients), len(w.Servers), how)))
	}
	return diags
}
