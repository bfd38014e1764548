package flows

import (
	"cmp"
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"

	"github.com/sosappliance/sosappliance/internal/portrange"
	"github.com/sosappliance/sosappliance/sdn/ofp13"
	"github.com/sosappliance/sosappliance/sdn/spread"
)

// Every flow the appliance owns carries CookiePrefix in the high 16 bits of
// its cookie; the controller reads, diffs and deletes only flows whose
// cookie matches CookiePrefix under CookieMask, so foreign flows are never
// touched.
const (
	CookiePrefix uint64 = 0x5053 << 48 // "PS"
	CookieMask   uint64 = 0xffff << 48
)

// Kind is the role of an owned flow, kept in bits 47..40 of its cookie so
// that `ovs-ofctl dump-flows BR cookie=0x5053020000000000/0xffffff0000000000`
// lists one kind.
type Kind uint8

// Kinds of owned flows.
const (
	KindBypass      Kind = 1 // traffic from an agent's port goes NORMAL
	KindSteerClient Kind = 2 // client -> server towards the client-site agent
	KindSteerServer Kind = 3 // server -> client towards the server-site agent
	KindNormal      Kind = 4 // everything else goes NORMAL
)

func (k Kind) String() string {
	switch k {
	case KindBypass:
		return "bypass"
	case KindSteerClient:
		return "steer-client"
	case KindSteerServer:
		return "steer-server"
	case KindNormal:
		return "normal"
	}
	return fmt.Sprintf("kind-%d", uint8(k))
}

// Priorities in table 0: agents' own traffic first so it is never steered
// back to them, then steering, then normal forwarding for the rest.
//
// Within steering, the server side's flows (a connection's replies) rank
// above the client side's (its opening direction). A segment whose two
// ports are both in a whitelist's range, with direction = "both" or two
// whitelists in opposite directions, matches one of each; the flows hold
// no state to say which end opened it. Taking the server side's makes
// the choice the same for every segment of a connection at both sites:
// at the opener's site the segment goes to the agent of the reply flow's
// bucket, which then carries it as a client-side agent (its divert takes
// any connection's first SYN of its whitelists); at the listener's site
// the replies go to the bucket of the opener, the agent the client side
// chose. A connection that is not the relay's passes that agent (its
// pass rules send it on).
const (
	PriorityBypass uint16 = 3000
	PrioritySteer  uint16 = 2000
	PriorityNormal uint16 = 1000
	// PriorityReply is the server side's steering, and
	// PriorityUnsteered the replies to agents' own addresses, taken out
	// of it.
	PriorityReply     = PrioritySteer + 1
	PriorityUnsteered = PrioritySteer + 2
)

// Table is the table the appliance's flows live in.
const Table uint8 = 0

// Cookie builds an owned cookie: prefix, kind, and a 40-bit id (the agent
// port for bypass, a hash of the whitelist name for steering).
func Cookie(kind Kind, id uint64) uint64 {
	return CookiePrefix | uint64(kind)<<40 | id&(1<<40-1)
}

// Owned reports whether a cookie carries the appliance's prefix.
func Owned(cookie uint64) bool { return cookie&CookieMask == CookiePrefix }

// CookieKind is the kind encoded in an owned cookie.
func CookieKind(cookie uint64) Kind { return Kind(cookie >> 40) }

// WhitelistID is the 40-bit id of a whitelist in steering cookies.
func WhitelistID(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return h.Sum64() & (1<<40 - 1)
}

// Forwarding modes.
const ForwardingNormal = "normal"

// Compile returns the flow set one switch must carry, sorted by priority
// (highest first) and then by cookie and match. It fails on intent it
// cannot express (clients and servers of different address families, a
// malformed MAC, two intents that need the same table entry). IPv4 steers
// match eth_type 0x0800 and ipv4_src/ipv4_dst, IPv6 ones eth_type 0x86dd
// and ipv6_src/ipv6_dst.
func Compile(sw Switch) ([]Flow, error) {
	if sw.Forwarding != "" && sw.Forwarding != ForwardingNormal {
		return nil, fmt.Errorf("switch %s: forwarding %q is not supported (only %q)", sw.Name, sw.Forwarding, ForwardingNormal)
	}
	var flows []Flow
	var errs []error
	for _, a := range sw.Agents {
		flows = append(flows, Flow{
			Table: Table, Priority: PriorityBypass, Cookie: Cookie(KindBypass, uint64(a.Port)),
			Match:        ofp13.NewMatch(ofp13.InPort(a.Port)),
			Instructions: normal(),
			Reason:       "bypass agent " + a.Name,
		})
	}
	for _, st := range sw.Steers {
		fs, err := compileSteer(st, sw.NoPortMasks)
		if err != nil {
			errs = append(errs, fmt.Errorf("switch %s: whitelist %s (%s side): %w", sw.Name, st.Whitelist, st.Side, err))
			continue
		}
		flows = append(flows, fs...)
	}
	flows = append(flows, Flow{
		Table: Table, Priority: PriorityNormal, Cookie: Cookie(KindNormal, 0),
		Match: ofp13.NewMatch(), Instructions: normal(), Reason: "normal forwarding",
	})
	for i := range flows {
		flows[i].Match = flows[i].Match.Canonical()
	}
	seen := map[Key]int{}
	for i, f := range flows {
		if j, dup := seen[f.Key()]; dup {
			errs = append(errs, fmt.Errorf("switch %s: %s and %s need the same flow entry %s",
				sw.Name, flows[j].Reason, f.Reason, f.Key()))
			continue
		}
		seen[f.Key()] = i
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	Sort(flows)
	return flows, nil
}

func normal() []ofp13.Instruction {
	return []ofp13.Instruction{&ofp13.ApplyActions{Actions: []ofp13.Action{&ofp13.ActionOutput{Port: ofp13.PortNormal}}}}
}

// portMatch is one TCP port match: exact, or a value/mask pair.
type portMatch = portrange.Masked

// portMatches are the port matches of a steer: one per aligned block of
// each range, or with noMasks one per port.
func portMatches(st Steer, noMasks bool) ([]portMatch, error) {
	ports := st.Ports
	if len(ports) == 0 {
		if st.Port == 0 {
			return nil, errors.New("no server port")
		}
		ports = []portrange.Range{portrange.Single(st.Port)}
	}
	var out []portMatch
	for _, r := range ports {
		if !r.Valid() {
			return nil, fmt.Errorf("port range %d-%d is empty", r.Lo, r.Hi)
		}
		if !noMasks {
			out = append(out, r.Masks()...)
			continue
		}
		for p := int(r.Lo); p <= int(r.Hi); p++ {
			out = append(out, portMatch{Value: uint16(p), Mask: 0xffff})
		}
	}
	return out, nil
}

func tcpPort(dst bool, m portMatch) ofp13.OXM {
	switch {
	case dst && m.Exact():
		return ofp13.TCPDst(m.Value)
	case dst:
		return ofp13.TCPDstMasked(m.Value, m.Mask)
	case m.Exact():
		return ofp13.TCPSrc(m.Value)
	}
	return ofp13.TCPSrcMasked(m.Value, m.Mask)
}

// servers are the server prefixes of a steer.
func servers(st Steer) ([]netip.Prefix, error) {
	if len(st.Servers) == 0 {
		if !st.Server.IsValid() {
			return nil, errors.New("no server")
		}
		return []netip.Prefix{netip.PrefixFrom(st.Server, st.Server.BitLen())}, nil
	}
	return st.Servers, nil
}

// ipPrefix checks a prefix and unmaps an IPv4-mapped one.
func ipPrefix(p netip.Prefix, what string) (netip.Prefix, error) {
	if !p.IsValid() {
		return netip.Prefix{}, fmt.Errorf("%s %s is not a valid prefix", what, p)
	}
	bits := p.Bits()
	if p.Addr().Is4In6() {
		bits -= 96
	}
	return netip.PrefixFrom(p.Addr().Unmap(), max(bits, 0)).Masked(), nil
}

// ipMatch is the start of a TCP match of one family: eth_type and
// ip_proto, then the source and destination prefixes.
func ipMatch(src, dst netip.Prefix, port ofp13.OXM) ofp13.Match {
	if src.Addr().Is4() {
		return ofp13.NewMatch(ofp13.EthType(0x0800), ofp13.IPProto(6), ofp13.IPv4Src(src), ofp13.IPv4Dst(dst), port)
	}
	return ofp13.NewMatch(ofp13.EthType(0x86dd), ofp13.IPProto(6), ofp13.IPv6Src(src), ofp13.IPv6Dst(dst), port)
}

// share is one agent's part of a spread steer: its actions and the
// value/mask pairs of its buckets (one empty pair for an unspread steer).
type share struct {
	agent   Agent
	matches []spread.Match
}

// shares deals a steer's buckets to its live agents.
func shares(st Steer) ([]share, error) {
	if len(st.Agents) == 0 {
		return []share{{st.Agent, []spread.Match{{}}}}, nil
	}
	up := make([]bool, len(st.Agents))
	for i, a := range st.Agents {
		up[i] = !slices.Contains(st.Down, a.Name)
	}
	b, err := spread.Assign(st.Spread, st.SpreadBits, len(st.Agents), up)
	if err != nil {
		return nil, err
	}
	var out []share
	for i, a := range st.Agents {
		if ms := b.Shares(i, len(st.Agents)); len(ms) > 0 {
			out = append(out, share{a, ms})
		}
	}
	if len(out) == 0 {
		return nil, errors.New("every agent of the spread is down")
	}
	return out, nil
}

// withShare adds a bucket match to the opener's side of a flow's match:
// its TCP port (ModePort) or the low 32 bits of its address
// (ModeAddress). It reports false when the address prefix and the bucket
// cannot both match (no packet would hit the flow).
func withShare(m ofp13.Match, mode spread.Mode, src bool, sm spread.Match) (ofp13.Match, bool) {
	if sm.Mask == 0 {
		return m, true
	}
	if mode == spread.ModePort {
		if src {
			m.Fields = append(m.Fields, ofp13.TCPSrcMasked(uint16(sm.Value), uint16(sm.Mask)))
		} else {
			m.Fields = append(m.Fields, ofp13.TCPDstMasked(uint16(sm.Value), uint16(sm.Mask)))
		}
		return m, true
	}
	fields := []ofp13.OXMField{ofp13.FieldIPv4Dst, ofp13.FieldIPv6Dst}
	if src {
		fields = []ofp13.OXMField{ofp13.FieldIPv4Src, ofp13.FieldIPv6Src}
	}
	out := ofp13.Match{Fields: slices.Clone(m.Fields)}
	for i, o := range out.Fields {
		if !o.IsBasic(fields[0]) && !o.IsBasic(fields[1]) {
			continue
		}
		v, mask := slices.Clone(o.Value), slices.Clone(o.Mask)
		if mask == nil {
			mask = make([]byte, len(v))
			for j := range mask {
				mask[j] = 0xff
			}
		}
		n := len(v)
		for j := range 4 {
			bv, bm := byte(sm.Value>>(24-8*j)), byte(sm.Mask>>(24-8*j))
			if v[n-4+j]&mask[n-4+j]&bm != bv&mask[n-4+j]&bm {
				return m, false
			}
			v[n-4+j] = v[n-4+j]&^bm | bv&bm
			mask[n-4+j] |= bm
		}
		out.Fields[i] = ofp13.OXM{Class: o.Class, Field: o.Field, Value: v, Mask: mask}
	}
	return out, true
}

func compileSteer(st Steer, noMasks bool) ([]Flow, error) {
	agents := st.Agents
	if len(agents) == 0 {
		agents = []Agent{st.Agent}
	}
	for _, a := range agents {
		if len(a.MAC) != 6 {
			return nil, fmt.Errorf("agent %s: MAC %q is not 6 bytes", a.Name, a.MAC)
		}
	}
	if len(st.Agents) > 0 && st.Spread == spread.ModePort && noMasks {
		return nil, errors.New(`spread mode "port" needs masked TCP port matches, which this switch lacks; use spread mode "address"`)
	}
	if len(st.Clients) == 0 {
		return nil, errors.New("no client prefixes")
	}
	srvs, err := servers(st)
	if err != nil {
		return nil, err
	}
	ports, err := portMatches(st, noMasks)
	if err != nil {
		return nil, err
	}
	parts, err := shares(st)
	if err != nil {
		return nil, err
	}
	var cookie uint64
	switch st.Side {
	case ClientSide:
		cookie = Cookie(KindSteerClient, WhitelistID(st.Whitelist))
	case ServerSide:
		cookie = Cookie(KindSteerServer, WhitelistID(st.Whitelist))
	default:
		return nil, fmt.Errorf("side %q is neither %q nor %q", st.Side, ClientSide, ServerSide)
	}
	opened := ""
	if st.Reverse {
		opened = " (opened by servers)"
	}
	toAgent := func(a Agent) []ofp13.Instruction {
		return []ofp13.Instruction{&ofp13.ApplyActions{Actions: []ofp13.Action{
			&ofp13.ActionSetField{Field: ofp13.EthDst(a.MAC)},
			&ofp13.ActionOutput{Port: a.Port},
		}}}
	}
	flows := pinFlows(st, cookie, opened)
	for _, s := range srvs {
		server, err := ipPrefix(s, "server")
		if err != nil {
			return nil, err
		}
		for _, c := range st.Clients {
			client, err := ipPrefix(c, "client prefix")
			if err != nil {
				return nil, err
			}
			if client.Addr().Is4() != server.Addr().Is4() {
				return nil, fmt.Errorf("client prefix %s and server %s differ in address family", client, server)
			}
			for _, pm := range ports {
				for _, part := range parts {
					reason := fmt.Sprintf("whitelist %s%s %s side via agent %s", st.Whitelist, opened, st.Side, part.agent.Name)
					var base ofp13.Match
					if st.Side == ClientSide {
						base = ipMatch(client, server, tcpPort(true, pm))
					} else {
						base = ipMatch(server, client, tcpPort(false, pm))
					}
					for _, sm := range part.matches {
						m, ok := withShare(base, st.Spread, st.Side == ClientSide, sm)
						if !ok {
							continue
						}
						prio := PrioritySteer
						if st.Side == ServerSide {
							prio = PriorityReply
						}
						flows = append(flows, Flow{Table: Table, Priority: prio, Instructions: toAgent(part.agent),
							Cookie: cookie, Match: m, Reason: reason})
					}
				}
				if st.Side == ClientSide {
					continue
				}
				for _, a := range st.Unsteered {
					if a = a.Unmap(); !client.Contains(a) {
						continue
					}
					flows = append(flows, Flow{Table: Table, Priority: PriorityUnsteered, Instructions: normal(),
						Cookie: cookie,
						Match:  ipMatch(server, netip.PrefixFrom(a, a.BitLen()), tcpPort(false, pm)),
						Reason: fmt.Sprintf("whitelist %s%s: replies to agent address %s are not steered", st.Whitelist, opened, a),
					})
				}
			}
		}
	}
	return flows, nil
}

// SteerFlowDetail says what SteerFlowCount multiplies, e.g. "1 client
// prefix x 2 server prefixes x 11 port matches (value/mask)".
func SteerFlowDetail(st Steer, noMasks bool) string {
	srvs, _ := servers(st)
	ports, _ := portMatches(st, noMasks)
	kind := "value/mask"
	if noMasks {
		kind = "one per port: the switch has no masked port matches"
	}
	detail := fmt.Sprintf("%s x %s x %s (%s)", plural(len(st.Clients), "client prefix", "client prefixes"),
		plural(len(srvs), "server prefix", "server prefixes"), plural(len(ports), "port match", "port matches"), kind)
	if len(st.Agents) > 0 {
		n := 0
		if parts, err := shares(st); err == nil {
			for _, p := range parts {
				n += len(p.matches)
			}
		}
		detail += fmt.Sprintf(" x %s (spread by %s over %d agents, %d buckets)", plural(n, "bucket pattern", "bucket patterns"), st.Spread, len(st.Agents), 1<<st.SpreadBits)
	}
	return detail
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// SteerFlowCount is how many flows Compile makes for one steer on a switch
// with or without masked port matches, not counting the unsteered
// exceptions; plans show it per whitelist.
func SteerFlowCount(st Steer, noMasks bool) int {
	srvs, err := servers(st)
	ports, err2 := portMatches(st, noMasks)
	if err != nil || err2 != nil {
		return 0
	}
	n := 1
	if len(st.Agents) > 0 {
		// Every agent's buckets, merged: at most 2^bits patterns.
		n = 0
		if parts, err := shares(st); err == nil {
			for _, p := range parts {
				n += len(p.matches)
			}
		}
	}
	return len(srvs) * len(st.Clients) * len(ports) * n
}

// Sort orders flows as Compile returns them: table, priority (highest
// first), cookie, match.
//
// The match and key texts are made once per flow, not per comparison
// (cmp.Or evaluates all its arguments): a switch's dump of flows with
// long matches took seconds of CPU to sort that way.
func Sort(flows []Flow) {
	type keyed struct {
		f          Flow
		match, key string
	}
	ks := make([]keyed, len(flows))
	for i, f := range flows {
		ks[i] = keyed{f, f.Match.String(), string(f.Key())}
	}
	slices.SortStableFunc(ks, func(a, b keyed) int {
		if c := cmp.Compare(a.f.Table, b.f.Table); c != 0 {
			return c
		}
		if c := cmp.Compare(b.f.Priority, a.f.Priority); c != 0 {
			return c
		}
		if c := cmp.Compare(a.f.Cookie, b.f.Cookie); c != 0 {
			return c
		}
		return cmp.Or(cmp.Compare(a.match, b.match), cmp.Compare(a.key, b.key))
	})
	for i := range ks {
		flows[i] = ks[i].f
	}
}

// FailOpen returns the switch without the steering of every whitelist that
// depends on an agent isDown reports down (for a spread steer: every agent
// of one of its sites), with the buckets of the dead agents of spread
// steers dealt to their live ones, and the names of the whitelists
// it withdrew, sorted. Their traffic then takes normal forwarding: slow,
// but not black-holed by a dead agent.
func FailOpen(sw Switch, isDown func(agent string) bool) (Switch, []string) {
	out := sw
	out.Steers = nil
	withdrawn := map[string]bool{}
	allDown := func(group []string) bool {
		return len(group) > 0 && !slices.ContainsFunc(group, func(a string) bool { return !isDown(a) })
	}
	for _, st := range sw.Steers {
		down := slices.ContainsFunc(st.DependsOn, isDown) || slices.ContainsFunc(st.DependsOnSites, allDown)
		if len(st.Agents) == 0 {
			down = down || isDown(st.Agent.Name)
		}
		var dead []string
		for _, a := range st.Agents {
			if isDown(a.Name) {
				dead = append(dead, a.Name)
			}
		}
		if down || len(st.Agents) > 0 && len(dead) == len(st.Agents) {
			withdrawn[st.Whitelist] = true
			continue
		}
		// Fail-over: the dead agents' buckets go to the live ones; no
		// other bucket changes owner.
		st.Down = dead
		out.Steers = append(out.Steers, st)
	}
	names := make([]string, 0, len(withdrawn))
	for n := range withdrawn {
		names = append(names, n)
	}
	slices.Sort(names)
	return out, names
}

// Held is a live session an agent reports: its whitelist, and the
// client's and server's address and port (the opener's and the listener's).
type Held struct {
	Whitelist      string
	Client, Server netip.AddrPort
}

// PrioritySession is the exact-match flows that pin live sessions to the
// agent holding them, above the bucket flows and their exceptions.
const PrioritySession = PrioritySteer + 3

// PinSessions keeps every live session on the agent that holds it when
// its bucket now belongs to another agent of the site: an agent that
// comes back takes its buckets back for new connections at once, while
// the sessions a survivor took over in them meanwhile keep reaching the
// survivor through one exact-match flow each (both ports and addresses),
// until the survivor no longer reports them. held maps each agent to the
// sessions it reports; apply it after FailOpen, whose Down it uses.
//
// A session's bucket is the one of the flow that wins for the packets its
// agent receives on this switch: the opener's (client to server), or the
// listener's replies (server to client), whichever this switch steers.
// That is not always its own whitelist's flow of that side: when both its
// ports are in a range steered both ways (direction = "both", or two
// whitelists in opposite directions), the opener's packets take the other
// direction's server-side flow, which ranks higher and deals them by the
// listener (review, helper-111).
//
// Agents' reports are not trusted to be consistent: a session listed
// twice is pinned once, and one that two agents claim is pinned to
// neither (at most one of them holds it, and which cannot be told), so
// no report can make the switch's flow set fail to compile.
func PinSessions(sw Switch, held map[string][]Held) Switch {
	out := sw
	out.Steers = slices.Clone(sw.Steers)
	// The live dealing of each spread steer.
	deals := make([]*spread.Buckets, len(out.Steers))
	ups := make([][]bool, len(out.Steers))
	for i, st := range out.Steers {
		if len(st.Agents) == 0 {
			continue
		}
		up := make([]bool, len(st.Agents))
		for j, a := range st.Agents {
			up[j] = !slices.Contains(st.Down, a.Name)
		}
		b, err := spread.Assign(st.Spread, st.SpreadBits, len(st.Agents), up)
		if err != nil {
			continue
		}
		deals[i], ups[i] = &b, up
		out.Steers[i].Pins = nil
	}
	type pinKey struct {
		steer          int
		client, server netip.AddrPort
	}
	owner := map[pinKey]int{} // index into the steer's Agents; -1: claimed by two
	var order []pinKey
	seen := map[string]bool{}
	for _, a := range sw.Agents {
		if seen[a.Name] {
			continue
		}
		seen[a.Name] = true
		for _, h := range held[a.Name] {
			// One spelling of each address (the flows match IPv4 as
			// IPv4), or one session would make two pins of one match.
			h.Client = netip.AddrPortFrom(h.Client.Addr().Unmap(), h.Client.Port())
			h.Server = netip.AddrPortFrom(h.Server.Addr().Unmap(), h.Server.Port())
			for _, p := range [][2]netip.AddrPort{{h.Client, h.Server}, {h.Server, h.Client}} {
				w := winningSteer(out.Steers, p[0], p[1])
				if w < 0 || deals[w] == nil {
					continue
				}
				st := out.Steers[w]
				// The session's own whitelist's flow, or for the
				// opener's packets another direction's server side.
				opener := p[0] == h.Client
				if st.Whitelist != h.Whitelist && !(opener && st.Side == ServerSide) {
					continue
				}
				j := slices.IndexFunc(st.Agents, func(x Agent) bool { return x.Name == a.Name })
				if j < 0 || !ups[w][j] {
					continue
				}
				// The bucket is the opener's: the source of a
				// client side's packets, the destination of a
				// server side's.
				k := pinKey{steer: w, client: p[0], server: p[1]}
				if st.Side == ServerSide {
					k.client, k.server = p[1], p[0]
				}
				if deals[w].Agent(k.client) == j {
					continue
				}
				switch prev, ok := owner[k]; {
				case !ok:
					owner[k] = j
					order = append(order, k)
				case prev != j:
					owner[k] = -1
				}
			}
		}
	}
	for _, k := range order {
		if j := owner[k]; j >= 0 {
			st := &out.Steers[k.steer]
			st.Pins = append(st.Pins, Pin{Client: k.client, Server: k.server, Agent: st.Agents[j]})
		}
	}
	return out
}

// winningSteer is the index of the steer whose flow a TCP packet from src
// to dst takes on the switch, or -1: the server side's flows rank above
// the client side's (PriorityReply), and the exceptions for replies to an
// agent's own address (PriorityUnsteered) above both.
func winningSteer(steers []Steer, src, dst netip.AddrPort) int {
	best := -1
	for i, st := range steers {
		var hit bool
		if st.Side == ClientSide {
			hit = steerCovers(st, Held{Client: src, Server: dst})
		} else {
			hit = steerCovers(st, Held{Client: dst, Server: src})
			if hit && slices.ContainsFunc(st.Unsteered, func(a netip.Addr) bool { return a.Unmap() == dst.Addr().Unmap() }) {
				return -1
			}
		}
		if hit && (best < 0 || st.Side == ServerSide && steers[best].Side == ClientSide) {
			best = i
		}
	}
	return best
}

// steerCovers reports whether a session belongs to the steer's direction:
// its client in the steer's clients, its server in its servers and on one
// of its ports.
func steerCovers(st Steer, h Held) bool {
	c, s := h.Client.Addr().Unmap(), h.Server.Addr().Unmap()
	if !slices.ContainsFunc(st.Clients, func(p netip.Prefix) bool { return p.Contains(c) }) {
		return false
	}
	srvs, err := servers(st)
	if err != nil || !slices.ContainsFunc(srvs, func(p netip.Prefix) bool { return p.Contains(s) }) {
		return false
	}
	if len(st.Ports) == 0 {
		return st.Port == h.Server.Port()
	}
	return portrange.ContainsPort(st.Ports, h.Server.Port())
}

func pinFlows(st Steer, cookie uint64, opened string) []Flow {
	var out []Flow
	for _, p := range st.Pins {
		c, s := p.Client.Addr().Unmap(), p.Server.Addr().Unmap()
		cp, sp := netip.PrefixFrom(c, c.BitLen()), netip.PrefixFrom(s, s.BitLen())
		var m ofp13.Match
		if st.Side == ClientSide {
			m = ipMatch(cp, sp, ofp13.TCPSrc(p.Client.Port()))
			m.Fields = append(m.Fields, ofp13.TCPDst(p.Server.Port()))
		} else {
			m = ipMatch(sp, cp, ofp13.TCPSrc(p.Server.Port()))
			m.Fields = append(m.Fields, ofp13.TCPDst(p.Client.Port()))
		}
		out = append(out, Flow{Table: Table, Priority: PrioritySession, Cookie: cookie, Match: m,
			Instructions: []ofp13.Instruction{&ofp13.ApplyActions{Actions: []ofp13.Action{
				&ofp13.ActionSetField{Field: ofp13.EthDst(p.Agent.MAC)},
				&ofp13.ActionOutput{Port: p.Agent.Port},
			}}},
			Reason: fmt.Sprintf("whitelist %s%s: live session %s -> %s stays on agent %s", st.Whitelist, opened, p.Client, p.Server, p.Agent.Name)})
	}
	return out
}
