package flows

import (
	"cmp"
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"

	"github.com/sosappliance/sosappliance/sdn/ofp13"
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
const (
	PriorityBypass uint16 = 3000
	PrioritySteer  uint16 = 2000
	PriorityNormal uint16 = 1000
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
// cannot express (non-IPv4 addresses, a malformed MAC, two intents that
// need the same table entry).
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
		fs, err := compileSteer(st)
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

func compileSteer(st Steer) ([]Flow, error) {
	if len(st.Agent.MAC) != 6 {
		return nil, fmt.Errorf("agent %s: MAC %q is not 6 bytes", st.Agent.Name, st.Agent.MAC)
	}
	if !st.Server.Unmap().Is4() {
		return nil, fmt.Errorf("server %s is not IPv4", st.Server)
	}
	if len(st.Clients) == 0 {
		return nil, errors.New("no client prefixes")
	}
	server := netip.PrefixFrom(st.Server.Unmap(), 32)
	instructions := []ofp13.Instruction{&ofp13.ApplyActions{Actions: []ofp13.Action{
		&ofp13.ActionSetField{Field: ofp13.EthDst(st.Agent.MAC)},
		&ofp13.ActionOutput{Port: st.Agent.Port},
	}}}
	var flows []Flow
	for _, c := range st.Clients {
		if !c.Addr().Unmap().Is4() || !c.IsValid() {
			return nil, fmt.Errorf("client prefix %s is not IPv4", c)
		}
		client := netip.PrefixFrom(c.Addr().Unmap(), c.Bits()).Masked()
		f := Flow{Table: Table, Priority: PrioritySteer, Instructions: instructions}
		switch st.Side {
		case ClientSide:
			f.Cookie = Cookie(KindSteerClient, WhitelistID(st.Whitelist))
			f.Match = ofp13.NewMatch(ofp13.EthType(0x0800), ofp13.IPProto(6),
				ofp13.IPv4Src(client), ofp13.IPv4Dst(server), ofp13.TCPDst(st.Port))
		case ServerSide:
			f.Cookie = Cookie(KindSteerServer, WhitelistID(st.Whitelist))
			f.Match = ofp13.NewMatch(ofp13.EthType(0x0800), ofp13.IPProto(6),
				ofp13.IPv4Src(server), ofp13.TCPSrc(st.Port), ofp13.IPv4Dst(client))
		default:
			return nil, fmt.Errorf("side %q is neither %q nor %q", st.Side, ClientSide, ServerSide)
		}
		f.Reason = fmt.Sprintf("whitelist %s %s side via agent %s", st.Whitelist, st.Side, st.Agent.Name)
		flows = append(flows, f)
		if st.Side != ServerSide {
			continue
		}
		for _, a := range st.Unsteered {
			if a = a.Unmap(); !a.Is4() || !client.Contains(a) {
				continue
			}
			flows = append(flows, Flow{Table: Table, Priority: PrioritySteer + 1, Instructions: normal(),
				Cookie: f.Cookie,
				Match: ofp13.NewMatch(ofp13.EthType(0x0800), ofp13.IPProto(6),
					ofp13.IPv4Src(server), ofp13.TCPSrc(st.Port), ofp13.IPv4Dst(netip.PrefixFrom(a, 32))),
				Reason: fmt.Sprintf("whitelist %s: replies to agent address %s are not steered", st.Whitelist, a),
			})
		}
	}
	return flows, nil
}

// Sort orders flows as Compile returns them: table, priority (highest
// first), cookie, match.
func Sort(flows []Flow) {
	slices.SortStableFunc(flows, func(a, b Flow) int {
		return cmp.Or(cmp.Compare(a.Table, b.Table), cmp.Compare(b.Priority, a.Priority),
			cmp.Compare(a.Cookie, b.Cookie), cmp.Compare(a.Match.String(), b.Match.String()), cmp.Compare(a.Key(), b.Key()))
	})
}

// FailOpen returns the switch without the steering of every whitelist that
// depends on an agent isDown reports down, and the names of the whitelists
// it withdrew, sorted. Their traffic then takes normal forwarding: slow,
// but not black-holed by a dead agent.
func FailOpen(sw Switch, isDown func(agent string) bool) (Switch, []string) {
	out := sw
	out.Steers = nil
	withdrawn := map[string]bool{}
	for _, st := range sw.Steers {
		down := slices.ContainsFunc(st.DependsOn, isDown) || isDown(st.Agent.Name)
		if down {
			withdrawn[st.Whitelist] = true
			continue
		}
		out.Steers = append(out.Steers, st)
	}
	names := make([]string, 0, len(withdrawn))
	for n := range withdrawn {
		names = append(names, n)
	}
	slices.Sort(names)
	return out, names
}
