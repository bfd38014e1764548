package item

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/sosappliance/sosappliance/internal/portrange"
)

// Steering keys.
const (
	SteeringKeyNftables = "nftables"
	SteeringKeyRule     = "rule"
	SteeringKeyRoute    = "route"
)

// Defaults for the steering numbers an operator rarely sets. They spell
// "SO" (0x534f) so they are recognisable in `ip rule` and `nft` output and
// unlikely to collide with marks and tables of other software.
const (
	DefaultSteeringMark         uint32 = 0x534f
	DefaultSteeringRouteTable   uint32 = 0x534f
	DefaultSteeringRulePriority uint32 = 0x534f
)

// SteeringSpec is the agent steering host state of one node (DESIGN.md
// section 3): TCP from whitelisted clients to a whitelisted server is
// diverted with TPROXY to the relay's transparent listener and marked; the
// replies for the relay's transparent sockets are marked too; a policy rule
// sends marked packets to a route table whose default route is local.
type SteeringSpec struct {
	// Interface is the agent interface. When set, diversion only applies
	// to packets arriving on it, and its rp_filter is made loose.
	Interface string
	// Mark, RouteTable and RulePriority default to the Default* values.
	Mark         uint32
	RouteTable   uint32
	RulePriority uint32
	// ListenPort is the relay's transparent listener.
	ListenPort uint16
	// Divert lists the client-side whitelists this agent serves. An agent
	// that is only ever server-side needs none: its replies are caught by
	// the transparent-socket rule.
	Divert []Divert
	// Replies lists the whitelists this agent serves as the server side:
	// their servers' packets to their clients, from one of Ports. The
	// switch steers all of them here; those that belong to no relay
	// socket (a connection a server opened from such a port) are sent on.
	// Divert's packets that are neither a relay socket's nor a new
	// connection's are sent on too.
	Replies []Divert
}

// TproxyRules is the content of the sosappliance nftables table; its
// canonical JSON is the value of the steering/nftables item. With no
// diverts, Interface and ListenPort do not appear in the table and are left
// out of the canonical value.
type TproxyRules struct {
	Interface  string   `json:"interface,omitempty"`
	Mark       uint32   `json:"mark"`
	ListenPort uint16   `json:"listen_port,omitempty"`
	Divert     []Divert `json:"divert"`
	Replies    []Divert `json:"replies,omitempty"`
}

// Divert sends new TCP from Clients to Servers on one of Ports to the
// relay. Server and Port are the form for one server and one port; the
// canonical value holds Servers and Ports only.
type Divert struct {
	Clients []netip.Prefix    `json:"clients"`
	Servers []netip.Prefix    `json:"servers,omitempty"`
	Ports   []portrange.Range `json:"ports,omitempty"`
	Server  netip.Addr        `json:"server,omitzero"`
	Port    uint16            `json:"port,omitempty"`
}

// SteeringRule is the policy rule: marked packets look up RouteTable.
type SteeringRule struct {
	Mark, Table, Priority uint32
}

// SteeringRoute is the local default route in the steering route table.
type SteeringRoute struct {
	Table uint32
}

// WithDefaults is the spec with the Default* values for the numbers left 0.
func (s SteeringSpec) WithDefaults() SteeringSpec {
	if s.Mark == 0 {
		s.Mark = DefaultSteeringMark
	}
	if s.RouteTable == 0 {
		s.RouteTable = DefaultSteeringRouteTable
	}
	if s.RulePriority == 0 {
		s.RulePriority = DefaultSteeringRulePriority
	}
	return s
}

// Items turns the spec into the items that converge it: the rp_filter
// sysctl of the interface and the steering table, rule and route.
func (s SteeringSpec) Items() ([]Item, error) {
	s = s.WithDefaults()
	tp := TproxyRules{Interface: s.Interface, Mark: s.Mark, ListenPort: s.ListenPort, Divert: s.Divert, Replies: s.Replies}
	value, err := tp.Canonical()
	if err != nil {
		return nil, err
	}
	rule := SteeringRule{Mark: s.Mark, Table: s.RouteTable, Priority: s.RulePriority}
	if err := rule.Validate(); err != nil {
		return nil, err
	}
	route := SteeringRoute{Table: s.RouteTable}
	var items []Item
	if s.Interface != "" {
		// Loose mode (2): steered packets carry addresses that are not
		// this host's, and strict reverse-path checks would drop them.
		items = append(items, Item{Kind: KindSysctl, Key: RPFilterKey(s.Interface), Value: "2"})
	}
	return append(items,
		Item{Kind: KindSteering, Key: SteeringKeyNftables, Value: value},
		Item{Kind: KindSteering, Key: SteeringKeyRule, Value: rule.String()},
		Item{Kind: KindSteering, Key: SteeringKeyRoute, Value: route.String()},
	), nil
}

// RPFilterKey is the rp_filter sysctl of an interface; dots in the name
// become "/" as sysctl(8) spells them.
func RPFilterKey(ifname string) string {
	return "net.ipv4.conf." + strings.ReplaceAll(ifname, ".", "/") + ".rp_filter"
}

// validSteeringInterface is the kernel's rule for an interface name
// (dev_valid_name): under 16 bytes, not "." or "..", no '/', ':', NUL or
// byte the kernel's isspace takes (which reads bytes as Latin-1: 0xA0,
// as in UTF-8's "à" or a no-break space, is white space to it). Empty is
// valid here: steering without an interface.
func validSteeringInterface(name string) bool {
	if name == "" {
		return true
	}
	if len(name) > 15 || name == "." || name == ".." {
		return false
	}
	for i := range len(name) {
		switch c := name[i]; {
		case c == '/', c == ':', c == 0, c == ' ', c >= '\t' && c <= '\r', c == 0xa0:
			return false
		}
	}
	return true
}

// Normalize merges diverts to the same server and port, masks and sorts
// client prefixes, and sorts diverts, so equal rule sets have equal text.
// It refuses rule sets the steering table cannot hold.
func (t TproxyRules) Normalize() (TproxyRules, error) {
	var errs []error
	if t.Mark == 0 {
		errs = append(errs, errors.New("steering mark must not be 0"))
	}
	if t.ListenPort == 0 && len(t.Divert) > 0 {
		errs = append(errs, errors.New("steering listen port must not be 0"))
	}
	if !validSteeringInterface(t.Interface) {
		errs = append(errs, fmt.Errorf("steering interface %q is not a valid interface name", t.Interface))
	}
	diverts, errs1 := normalizeDiverts(t.Divert)
	replies, errs2 := normalizeDiverts(t.Replies)
	if err := errors.Join(append(append(errs, errs1...), errs2...)...); err != nil {
		return TproxyRules{}, err
	}
	out := TproxyRules{Mark: t.Mark, Divert: diverts, Replies: replies}
	// Without diverts the table has no rule that names the listener,
	// and without replies either none that names the interface; leaving
	// them out keeps the value equal to what can be read back from the
	// table.
	if len(diverts) > 0 {
		out.ListenPort = t.ListenPort
	}
	if len(diverts) > 0 || len(replies) > 0 {
		out.Interface = t.Interface
	}
	return out, nil
}

// normalizeDiverts merges diverts to the same servers and ports, masks and
// sorts their prefixes, and sorts them; the errors say which it refused.
func normalizeDiverts(in []Divert) ([]Divert, []error) {
	var errs []error
	type target struct {
		servers, ports string
	}
	merged := map[target]*Divert{}
	for _, d := range in {
		servers := slices.Clone(d.Servers)
		if d.Server.IsValid() {
			a := d.Server.Unmap()
			servers = append(servers, netip.PrefixFrom(a, a.BitLen())) // one address, of either family
		}
		ports := slices.Clone(d.Ports)
		if d.Port != 0 {
			ports = append(ports, portrange.Single(d.Port))
		}
		what := fmt.Sprintf("steering servers %v ports %s", servers, portrange.Join(ports))
		if len(servers) == 0 {
			errs = append(errs, fmt.Errorf("%s: no server", what))
			continue
		}
		family := func(ps []netip.Prefix, role string) []netip.Prefix {
			out := make([]netip.Prefix, 0, len(ps))
			for _, p := range ps {
				if !p.IsValid() {
					errs = append(errs, fmt.Errorf("steering %s %v: not a valid prefix", role, p))
					continue
				}
				bits := p.Bits()
				if p.Addr().Is4In6() {
					bits -= 96
				}
				out = append(out, netip.PrefixFrom(p.Addr().Unmap(), max(bits, 0)).Masked())
			}
			return out
		}
		servers = family(servers, "server")
		if len(ports) == 0 || slices.ContainsFunc(ports, func(r portrange.Range) bool { return !r.Valid() }) {
			errs = append(errs, fmt.Errorf("%s: port must not be 0 and ranges not empty", what))
			continue
		}
		if len(d.Clients) == 0 {
			errs = append(errs, fmt.Errorf("%s: no client prefixes", what))
			continue
		}
		clients := family(d.Clients, "client")
		if mixed := slices.ContainsFunc(append(slices.Clone(clients), servers...), func(p netip.Prefix) bool {
			return len(servers) > 0 && p.Addr().Is4() != servers[0].Addr().Is4()
		}); mixed {
			errs = append(errs, fmt.Errorf("%s: clients and servers mix IPv4 and IPv6", what))
			continue
		}
		servers, ports = NormalizePrefixes(servers), portrange.Normalize(ports)
		k := target{fmt.Sprint(servers), portrange.Join(ports)}
		if m, ok := merged[k]; ok {
			m.Clients = append(m.Clients, clients...)
			continue
		}
		merged[k] = &Divert{Clients: clients, Servers: servers, Ports: ports}
	}
	out := []Divert{}
	for _, d := range merged {
		d.Clients = NormalizePrefixes(d.Clients)
		out = append(out, *d)
	}
	slices.SortFunc(out, func(a, b Divert) int {
		return cmp.Or(slices.CompareFunc(a.Servers, b.Servers, comparePrefix),
			slices.CompareFunc(a.Ports, b.Ports, func(x, y portrange.Range) int {
				return cmp.Or(cmp.Compare(x.Lo, y.Lo), cmp.Compare(x.Hi, y.Hi))
			}),
			slices.CompareFunc(a.Clients, b.Clients, comparePrefix))
	})
	return out, errs
}

func comparePrefix(a, b netip.Prefix) int {
	return cmp.Or(a.Addr().Compare(b.Addr()), cmp.Compare(a.Bits(), b.Bits()))
}

// Canonical is the item value of the rule set: normalized, compact JSON.
func (t TproxyRules) Canonical() (string, error) {
	n, err := t.Normalize()
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(n)
	if err != nil {
		return "", fmt.Errorf("encode steering rules: %w", err)
	}
	return string(b), nil
}

// ParseTproxyRules reads an item value; unknown fields are refused so a
// typo cannot silently drop part of the rule set.
func ParseTproxyRules(value string) (TproxyRules, error) {
	var t TproxyRules
	dec := json.NewDecoder(bytes.NewReader([]byte(value)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		return TproxyRules{}, fmt.Errorf("steering rules %q: %w", value, err)
	}
	if dec.More() {
		return TproxyRules{}, fmt.Errorf("steering rules %q: trailing data", value)
	}
	return t.Normalize()
}

// Validate refuses a rule that is not one steering may own: zero numbers, a
// system route table, or a priority at or after the main table's.
func (r SteeringRule) Validate() error {
	if r.Mark == 0 || r.Table == 0 || r.Priority == 0 {
		return fmt.Errorf("steering rule %q: mark, table and priority must not be 0", r)
	}
	if r.Table == 253 || r.Table == 254 || r.Table == 255 {
		return fmt.Errorf("steering rule %q: table %d is a system table (default, main, local)", r, r.Table)
	}
	if r.Priority >= 32766 {
		return fmt.Errorf("steering rule %q: priority must be below the main table's 32766", r)
	}
	return nil
}

// String is the canonical value, in `ip rule` words:
// "fwmark 0x534f lookup 21327 priority 21327".
func (r SteeringRule) String() string {
	return fmt.Sprintf("fwmark %#x lookup %d priority %d", r.Mark, r.Table, r.Priority)
}

// ParseSteeringRule reads the canonical rule value.
func ParseSteeringRule(value string) (SteeringRule, error) {
	f := strings.Fields(value)
	if len(f) != 6 || f[0] != "fwmark" || f[2] != "lookup" || f[4] != "priority" {
		return SteeringRule{}, fmt.Errorf("steering rule %q: want \"fwmark MARK lookup TABLE priority PRIO\"", value)
	}
	mark, err1 := strconv.ParseUint(f[1], 0, 32)
	table, err2 := strconv.ParseUint(f[3], 10, 32)
	prio, err3 := strconv.ParseUint(f[5], 10, 32)
	if err := errors.Join(err1, err2, err3); err != nil {
		return SteeringRule{}, fmt.Errorf("steering rule %q: %w", value, err)
	}
	r := SteeringRule{Mark: uint32(mark), Table: uint32(table), Priority: uint32(prio)}
	return r, r.Validate()
}

// String is the canonical value, in `ip route` words:
// "local 0.0.0.0/0 dev lo table 21327".
func (r SteeringRoute) String() string {
	return fmt.Sprintf("local 0.0.0.0/0 dev lo table %d", r.Table)
}

// ParseSteeringRoute reads the canonical route value.
func ParseSteeringRoute(value string) (SteeringRoute, error) {
	f := strings.Fields(value)
	if len(f) != 6 || f[0] != "local" || f[1] != "0.0.0.0/0" || f[2] != "dev" || f[3] != "lo" || f[4] != "table" {
		return SteeringRoute{}, fmt.Errorf("steering route %q: want \"local 0.0.0.0/0 dev lo table TABLE\"", value)
	}
	table, err := strconv.ParseUint(f[5], 10, 32)
	if err != nil || table == 0 || table >= 253 && table <= 255 {
		return SteeringRoute{}, fmt.Errorf("steering route %q: bad table", value)
	}
	return SteeringRoute{Table: uint32(table)}, nil
}

// CanonicalSteeringValue rewrites a steering item value canonically.
func CanonicalSteeringValue(key, value string) (string, error) {
	switch key {
	case SteeringKeyNftables:
		t, err := ParseTproxyRules(value)
		if err != nil {
			return "", err
		}
		return t.Canonical()
	case SteeringKeyRule:
		r, err := ParseSteeringRule(value)
		return r.String(), err
	case SteeringKeyRoute:
		r, err := ParseSteeringRoute(value)
		return r.String(), err
	}
	return "", fmt.Errorf("steering key %q: want %s, %s or %s", key, SteeringKeyNftables, SteeringKeyRule, SteeringKeyRoute)
}
