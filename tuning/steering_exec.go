package tuning

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sosappliance/sosappliance/host/item"
)

// SteeringTable is the nftables table the appliance owns (family ip). It is
// the only table steering ever creates, changes or deletes.
const SteeringTable = "sosappliance"

// SteeringProtocol marks the policy rule and route the appliance creates
// (the "proto" of `ip rule` and `ip route`), so they are found and removed
// without touching rules and routes of anyone else.
const SteeringProtocol uint8 = 0x53

// Steering converges the agent steering host state in the network namespace
// of the calling thread: the nftables table SteeringTable, the policy rule
// and the local route, both tagged with SteeringProtocol. It only ever
// touches those objects.
type Steering struct{}

// NewSteering returns the steering executor.
func NewSteering() *Steering { return &Steering{} }

// Kind implements Executor.
func (s *Steering) Kind() string { return item.KindSteering }

// Observe reads each steering object; one that does not exist is reported
// not present. A table whose content is not what sosappliance writes is
// reported with a value saying so, which never equals a desired value.
func (s *Steering) Observe(ctx context.Context, items []item.Item) ([]item.Observation, error) {
	var errs []error
	obs := make([]item.Observation, 0, len(items))
	for _, it := range items {
		o := item.Observation{Item: item.Item{Kind: it.Kind, Key: it.Key}}
		var err error
		switch it.Key {
		case item.SteeringKeyNftables:
			o.Value, o.Present, err = observeSteeringTable()
		case item.SteeringKeyRule:
			o.Value, o.Present, err = observeSteeringRules()
		case item.SteeringKeyRoute:
			o.Value, o.Present, err = observeSteeringRoutes()
		default:
			_, err = item.CanonicalSteeringValue(it.Key, it.Value)
		}
		if err != nil {
			errs = append(errs, err)
		}
		obs = append(obs, o)
	}
	return obs, errors.Join(errs...)
}

// Validate checks that each value parses.
func (s *Steering) Validate(ctx context.Context, items []item.Item) error {
	var errs []error
	for _, it := range items {
		if _, err := item.CanonicalSteeringValue(it.Key, it.Value); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Apply converges one object and reads it back.
func (s *Steering) Apply(ctx context.Context, it item.Item) error {
	want, err := item.CanonicalSteeringValue(it.Key, it.Value)
	if err != nil {
		return err
	}
	switch it.Key {
	case item.SteeringKeyNftables:
		t, _ := item.ParseTproxyRules(want)
		err = applySteeringTable(t)
	case item.SteeringKeyRule:
		r, _ := item.ParseSteeringRule(want)
		err = applySteeringRule(r)
	case item.SteeringKeyRoute:
		r, _ := item.ParseSteeringRoute(want)
		err = applySteeringRoute(r)
	}
	if err != nil {
		return err
	}
	got, err := s.Observe(ctx, []item.Item{it})
	if err != nil {
		return err
	}
	if !got[0].Present || got[0].Value != want {
		return fmt.Errorf("steering %s: applied %q but read back %q", it.Key, want, got[0].Value)
	}
	return nil
}

// Remove deletes the object; it is not an error when it is already gone.
func (s *Steering) Remove(ctx context.Context, it item.Item) error {
	switch it.Key {
	case item.SteeringKeyNftables:
		return removeSteeringTable()
	case item.SteeringKeyRule:
		return deleteSteeringRules(nil)
	case item.SteeringKeyRoute:
		return deleteSteeringRoutes(nil)
	}
	return fmt.Errorf("steering key %q: want %s, %s or %s", it.Key, item.SteeringKeyNftables, item.SteeringKeyRule, item.SteeringKeyRoute)
}

func nftConn() (*nftables.Conn, error) {
	c, err := nftables.New()
	if err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	return c, nil
}

func steeringTableExists(c *nftables.Conn) (bool, error) {
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyIPv4)
	if err != nil {
		return false, fmt.Errorf("nftables: list tables: %w", err)
	}
	return slices.ContainsFunc(tables, func(t *nftables.Table) bool { return t.Name == SteeringTable }), nil
}

func observeSteeringTable() (value string, present bool, err error) {
	c, err := nftConn()
	if err != nil {
		return "", false, err
	}
	exists, err := steeringTableExists(c)
	if err != nil || !exists {
		return "", false, err
	}
	if why, err := checkSteeringChains(c); err != nil || why != "" {
		return unrecognisedTable(why), true, err
	}
	rules, err := dumpRules(SteeringTable, steeringChain)
	if err != nil {
		return "", true, err
	}
	sets, err := readSteeringSets(c)
	if err != nil {
		return "", true, err
	}
	t, err := decodeSteeringRules(rules, sets)
	if err != nil {
		return unrecognisedTable(err.Error()), true, nil
	}
	value, err = t.Canonical()
	if err != nil {
		return unrecognisedTable(err.Error()), true, nil
	}
	return value, true, nil
}

func unrecognisedTable(why string) string {
	return "table ip " + SteeringTable + " not as sosappliance writes it: " + why
}

// checkSteeringChains says why the table's chains are not exactly ours, or
// "" when they are.
func checkSteeringChains(c *nftables.Conn) (string, error) {
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyIPv4)
	if err != nil {
		return "", fmt.Errorf("nftables: list chains: %w", err)
	}
	var ours []*nftables.Chain
	for _, ch := range chains {
		if ch.Table != nil && ch.Table.Name == SteeringTable {
			ours = append(ours, ch)
		}
	}
	if len(ours) != 1 || ours[0].Name != steeringChain {
		names := make([]string, len(ours))
		for i, ch := range ours {
			names[i] = ch.Name
		}
		return fmt.Sprintf("chains [%s], want [%s]", strings.Join(names, " "), steeringChain), nil
	}
	ch, want := ours[0], steeringChainSpec(nil)
	if ch.Type != want.Type || ch.Hooknum == nil || *ch.Hooknum != *want.Hooknum ||
		ch.Priority == nil || *ch.Priority != *want.Priority ||
		(ch.Policy != nil && *ch.Policy != *want.Policy) {
		return fmt.Sprintf("chain %s is not type filter hook prerouting priority mangle policy accept", steeringChain), nil
	}
	return "", nil
}

// applySteeringTable replaces the whole table in one nftables transaction:
// add (so that delete cannot fail), delete, add again with the new content.
// Packets never see a half-written table.
func applySteeringTable(t item.TproxyRules) error {
	c, err := nftConn()
	if err != nil {
		return err
	}
	table := steeringTable()
	c.AddTable(table)
	c.DelTable(table)
	c.AddTable(table)
	chain := c.AddChain(steeringChainSpec(table))
	sets, rules := steeringRuleExprs(t)
	ids := map[string]uint32{}
	for _, s := range sets {
		set := &nftables.Set{Table: table, Name: s.name, KeyType: s.keyType, Interval: true}
		if err := c.AddSet(set, s.elements); err != nil {
			return fmt.Errorf("nftables: set %s: %w", s.name, err)
		}
		ids[s.name] = set.ID
	}
	for _, exprs := range rules {
		for _, e := range exprs {
			if lk, ok := e.(*expr.Lookup); ok {
				lk.SetID = ids[lk.SetName]
			}
		}
		c.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: exprs, UserData: ruleTag})
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: write table %s: %w", SteeringTable, err)
	}
	return nil
}

// readSteeringSets reads every set of the steering table with its
// elements.
func readSteeringSets(c *nftables.Conn) (map[string]nftSet, error) {
	sets, err := c.GetSets(steeringTable())
	if err != nil {
		return nil, fmt.Errorf("nftables: list sets of %s: %w", SteeringTable, err)
	}
	out := map[string]nftSet{}
	for _, s := range sets {
		elems, err := c.GetSetElements(s)
		if err != nil {
			return nil, fmt.Errorf("nftables: elements of set %s: %w", s.Name, err)
		}
		out[s.Name] = nftSet{keyType: s.KeyType.Name, interval: s.Interval, elements: elems}
	}
	return out, nil
}

func removeSteeringTable() error {
	c, err := nftConn()
	if err != nil {
		return err
	}
	exists, err := steeringTableExists(c)
	if err != nil || !exists {
		return err
	}
	c.DelTable(steeringTable())
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: delete table %s: %w", SteeringTable, err)
	}
	return nil
}

// ownRules lists the IPv4 policy rules tagged with SteeringProtocol.
func ownRules() ([]netlink.Rule, error) {
	all, err := netlink.RuleList(netlink.FAMILY_V4)
	if err != nil {
		return nil, fmt.Errorf("list policy rules: %w", err)
	}
	var ours []netlink.Rule
	for _, r := range all {
		if r.Protocol == SteeringProtocol {
			ours = append(ours, r)
		}
	}
	return ours, nil
}

// ruleValue writes a kernel rule in the canonical form when it is exactly
// the shape we create, and in a descriptive form otherwise.
func ruleValue(r netlink.Rule) string {
	mask := uint32(0xffffffff)
	if r.Mask != nil {
		mask = *r.Mask
	}
	shape := item.SteeringRule{Mark: r.Mark, Table: uint32(r.Table), Priority: uint32(r.Priority)}
	if mask == 0xffffffff && r.Src == nil && r.Dst == nil && r.IifName == "" && r.OifName == "" && !r.Invert &&
		(r.Type == 0 || r.Type == unix.FR_ACT_TO_TBL) && r.Tos == 0 && r.Goto <= 0 && shape.Validate() == nil {
		return shape.String()
	}
	return fmt.Sprintf("unexpected rule: %s fwmark %#x/%#x", r, r.Mark, mask)
}

func observeSteeringRules() (string, bool, error) {
	ours, err := ownRules()
	if err != nil || len(ours) == 0 {
		return "", false, err
	}
	values := make([]string, len(ours))
	for i, r := range ours {
		values[i] = ruleValue(r)
	}
	slices.Sort(values)
	return strings.Join(values, "; "), true, nil
}

// deleteSteeringRules deletes our rules except keep.
func deleteSteeringRules(keep *item.SteeringRule) error {
	ours, err := ownRules()
	if err != nil {
		return err
	}
	for _, r := range ours {
		if keep != nil && ruleValue(r) == keep.String() {
			continue
		}
		if err := netlink.RuleDel(&r); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("delete policy rule %s: %w", ruleValue(r), err)
		}
	}
	return nil
}

func applySteeringRule(want item.SteeringRule) error {
	if err := deleteSteeringRules(&want); err != nil {
		return err
	}
	ours, err := ownRules()
	if err != nil {
		return err
	}
	if len(ours) == 1 {
		return nil
	}
	r := netlink.NewRule()
	r.Family = netlink.FAMILY_V4
	r.Mark = want.Mark
	mask := uint32(0xffffffff)
	r.Mask = &mask
	r.Table = int(want.Table)
	r.Priority = int(want.Priority)
	r.Protocol = SteeringProtocol
	if err := netlink.RuleAdd(r); err != nil {
		return fmt.Errorf("add policy rule %s: %w", want, err)
	}
	return nil
}

// ownRoutes lists IPv4 routes in any table tagged with SteeringProtocol.
func ownRoutes() ([]netlink.Route, error) {
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_V4,
		&netlink.Route{Table: unix.RT_TABLE_UNSPEC, Protocol: netlink.RouteProtocol(SteeringProtocol)},
		netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		return nil, fmt.Errorf("list routes: %w", err)
	}
	return routes, nil
}

func routeValue(r netlink.Route) string {
	lo, _ := netlink.LinkByName("lo")
	isDefault := r.Dst == nil || (r.Dst.IP.Equal(net.IPv4zero) && isZeroMask(r.Dst.Mask))
	if r.Type == unix.RTN_LOCAL && isDefault && lo != nil && r.LinkIndex == lo.Attrs().Index && r.Table > 0 &&
		r.Gw == nil && len(r.MultiPath) == 0 {
		v := item.SteeringRoute{Table: uint32(r.Table)}.String()
		if _, err := item.ParseSteeringRoute(v); err == nil {
			return v
		}
	}
	return "unexpected route: " + r.String()
}

func isZeroMask(m net.IPMask) bool {
	ones, _ := m.Size()
	return ones == 0
}

func observeSteeringRoutes() (string, bool, error) {
	ours, err := ownRoutes()
	if err != nil || len(ours) == 0 {
		return "", false, err
	}
	values := make([]string, len(ours))
	for i, r := range ours {
		values[i] = routeValue(r)
	}
	slices.Sort(values)
	return strings.Join(values, "; "), true, nil
}

func deleteSteeringRoutes(keep *item.SteeringRoute) error {
	ours, err := ownRoutes()
	if err != nil {
		return err
	}
	for _, r := range ours {
		if keep != nil && routeValue(r) == keep.String() {
			continue
		}
		if err := netlink.RouteDel(&r); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("delete route %s: %w", routeValue(r), err)
		}
	}
	return nil
}

func applySteeringRoute(want item.SteeringRoute) error {
	if err := deleteSteeringRoutes(&want); err != nil {
		return err
	}
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	_, all, _ := net.ParseCIDR("0.0.0.0/0")
	r := &netlink.Route{
		LinkIndex: lo.Attrs().Index,
		Dst:       all,
		Table:     int(want.Table),
		Type:      unix.RTN_LOCAL,
		Scope:     netlink.SCOPE_HOST,
		Protocol:  netlink.RouteProtocol(SteeringProtocol),
	}
	if err := netlink.RouteReplace(r); err != nil {
		return fmt.Errorf("add route %s: %w", want, err)
	}
	return nil
}
