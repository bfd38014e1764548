package tuning

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	mnl "github.com/mdlayher/netlink"
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

// Restorable implements Restorer: an observed value Apply takes is one
// that parses.
func (s *Steering) Restorable(it item.Item) bool {
	_, err := item.CanonicalSteeringValue(it.Key, it.Value)
	return err == nil
}

// Validate checks that each value parses, that the route table holds no
// route steering did not make, and that no policy rule steering did not
// make looks up its table or matches its mark.
func (s *Steering) Validate(ctx context.Context, items []item.Item) error {
	var errs []error
	for _, it := range items {
		v, err := item.CanonicalSteeringValue(it.Key, it.Value)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		switch it.Key {
		case item.SteeringKeyRoute:
			r, _ := item.ParseSteeringRoute(v)
			if err := checkForeignRoutes(r, it.Origin); err != nil {
				errs = append(errs, err)
			}
		case item.SteeringKeyRule:
			r, _ := item.ParseSteeringRule(v)
			if err := checkForeignRules(r, it.Origin); err != nil {
				errs = append(errs, err)
			}
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
		if err = applySteeringRule(r); err == nil {
			err = readBack(it.Key, want, func() (bool, error) { return hasOwn(ownRules, ruleValue, r.String()) })
		}
		return err
	case item.SteeringKeyRoute:
		r, _ := item.ParseSteeringRoute(want)
		if err = applySteeringRoute(r); err == nil {
			err = readBack(it.Key, want, func() (bool, error) { return hasOwn(ownRoutes, routeValue, r.String()) })
		}
		return err
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

// hasOwn says whether each family steering routes holds want among our
// objects (rules or routes) as list lists them: applySteeringRule and
// applySteeringRoute may keep another beside it for a while.
func hasOwn[T any](list func(int) ([]T, error), value func(T) string, want string) (bool, error) {
	for _, fam := range routeFamilies() {
		ours, err := list(fam)
		if err != nil {
			return false, err
		}
		if !slices.ContainsFunc(ours, func(o T) bool { return value(o) == want }) {
			return false, nil
		}
	}
	return true, nil
}

// readBack checks that an applied rule or route is there: others of ours
// may stay beside it while the table still needs them, so its observed
// value need not equal want yet.
func readBack(key, want string, has func() (bool, error)) error {
	ok, err := has()
	if err != nil {
		return err
	}
	if !ok {
		v, _, _ := observeSteering(key)
		return fmt.Errorf("steering %s: applied %q but read back %q", key, want, v)
	}
	return nil
}

func observeSteering(key string) (string, bool, error) {
	if key == item.SteeringKeyRule {
		return observeSteeringRules()
	}
	return observeSteeringRoutes()
}

// Remove deletes the object; it is not an error when it is already gone.
func (s *Steering) Remove(ctx context.Context, it item.Item) error {
	switch it.Key {
	case item.SteeringKeyNftables:
		return removeSteeringTable()
	case item.SteeringKeyRule:
		return deleteSteeringRules(nil)
	case item.SteeringKeyRoute:
		return deleteSteeringRoutes(nil, false)
	}
	return fmt.Errorf("steering key %q: want %s, %s or %s", it.Key, item.SteeringKeyNftables, item.SteeringKeyRule, item.SteeringKeyRoute)
}

func nftConn(opts ...nftables.ConnOption) (*nftables.Conn, error) {
	c, err := nftables.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("nftables: open: %w", err)
	}
	return c, nil
}

// steeringSendBuffer is the send buffer of the connection that writes the
// steering table. The library sends a transaction as one message, and the
// kernel refuses one larger than the socket's send buffer (212,992 bytes
// by default, net.core.wmem_default): 4,500 IPv6 client hosts failed with
// "message too long". 32 MiB holds about 500,000 set elements; the
// appliance holds CAP_NET_ADMIN, which SO_SNDBUFFORCE needs.
const steeringSendBuffer = 32 << 20

// withSendBuffer sets the netlink socket's send buffer to n bytes, past
// net.core.wmem_max. Where that is not permitted (CAP_NET_ADMIN of a
// container's user namespace only) it asks for n within wmem_max: a
// table that fits the default buffer is written as before. It never
// fails the dial (the library would leak the socket).
func withSendBuffer(n int) nftables.ConnOption {
	return nftables.WithSockOptions(func(c *mnl.Conn) error {
		rc, err := c.SyscallConn()
		if err != nil {
			return nil
		}
		_ = rc.Control(func(fd uintptr) {
			if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, n) != nil {
				_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF, n)
			}
		})
		return nil
	})
}

func steeringTableExists(c *nftables.Conn, f nftFamily) (bool, error) {
	tables, err := c.ListTablesOfFamily(f.table)
	if err != nil {
		return false, fmt.Errorf("nftables: list %s tables: %w", f.name, err)
	}
	return slices.ContainsFunc(tables, func(t *nftables.Table) bool { return t.Name == SteeringTable }), nil
}

// observeSteeringTable reads the ip and ip6 steering tables as one value:
// absent when neither exists, unrecognised when one is missing or either
// holds what sosappliance does not write.
func observeSteeringTable() (value string, present bool, err error) {
	c, err := nftConn()
	if err != nil {
		return "", false, err
	}
	var got item.TproxyRules
	var missing []string
	found := 0
	for _, f := range nftFamilies {
		exists, err := steeringTableExists(c, f)
		if err != nil {
			return "", false, err
		}
		if !exists {
			missing = append(missing, f.name)
			continue
		}
		found++
		if why, err := checkSteeringChains(c, f); err != nil || why != "" {
			return unrecognisedTable(f, why), true, err
		}
		rules, err := dumpRules(f, SteeringTable, steeringChain)
		if err != nil {
			return "", true, err
		}
		sets, err := readSteeringSets(c, f)
		if err != nil {
			return "", true, err
		}
		t, err := decodeSteeringRules(rules, sets, f)
		if err != nil {
			return unrecognisedTable(f, err.Error()), true, nil
		}
		if why := mergeFamilies(&got, t, found == 1); why != "" {
			return unrecognisedTable(f, why), true, nil
		}
	}
	if found == 0 {
		return "", false, nil
	}
	if len(missing) > 0 {
		return "table " + strings.Join(missing, ", ") + " " + SteeringTable + " is missing", true, nil
	}
	value, err = got.Canonical()
	if err != nil {
		return unrecognisedTable(ipv4Family, err.Error()), true, nil
	}
	return value, true, nil
}

// mergeFamilies adds the rules read from one table to those of the
// others: the mark, where both have diverts the listener, and where both
// have diverts or replies the interface, must agree.
func mergeFamilies(into *item.TproxyRules, t item.TproxyRules, first bool) string {
	if first {
		*into = t
		return ""
	}
	if t.Mark != into.Mark {
		return fmt.Sprintf("mark %#x, the other table's is %#x", t.Mark, into.Mark)
	}
	if len(t.Divert) > 0 && len(into.Divert) > 0 && t.ListenPort != into.ListenPort {
		return "listen port differs from the other table's"
	}
	named := func(r item.TproxyRules) bool { return len(r.Divert)+len(r.Replies) > 0 }
	if named(t) && named(*into) && t.Interface != into.Interface {
		return "interface differs from the other table's"
	}
	if len(into.Divert) == 0 {
		into.ListenPort = t.ListenPort
	}
	if !named(*into) {
		into.Interface = t.Interface
	}
	into.Divert = append(into.Divert, t.Divert...)
	into.Replies = append(into.Replies, t.Replies...)
	return ""
}

func unrecognisedTable(f nftFamily, why string) string {
	return "table " + f.name + " " + SteeringTable + " not as sosappliance writes it: " + why
}

// checkSteeringChains says why the table's chains are not exactly ours, or
// "" when they are.
func checkSteeringChains(c *nftables.Conn, f nftFamily) (string, error) {
	chains, err := c.ListChainsOfTableFamily(f.table)
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
	c, err := nftConn(nftables.AsLasting(), withSendBuffer(steeringSendBuffer))
	if err != nil {
		return err
	}
	defer c.CloseLasting()
	for _, f := range nftFamilies {
		if err := addSteeringTable(c, t, f); err != nil {
			return err
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: write table %s: %w", SteeringTable, err)
	}
	// The table marks with t.Mark now: a rule of ours kept for the mark
	// it set before (applySteeringRule) goes, with the routes only it
	// looked up.
	if err := deleteSteeringRules(func(r netlink.Rule) bool { return r.Mark == t.Mark }); err != nil {
		return err
	}
	return pruneSteeringRoutes(nil)
}

// setElementsPerMessage is how many set elements one netlink message of
// addSteeringTable carries: an IPv6 interval element encodes in 36 bytes,
// so 512 of them stay well under the 64 KiB a netlink attribute holds.
const setElementsPerMessage = 512

// addSteeringTable queues the replacement of the table of family f: add
// (so that delete cannot fail), delete, add again with the new content.
func addSteeringTable(c *nftables.Conn, t item.TproxyRules, f nftFamily) error {
	table := steeringTable(f)
	c.AddTable(table)
	c.DelTable(table)
	c.AddTable(table)
	chain := c.AddChain(steeringChainSpec(table))
	sets, rules := steeringRuleExprs(t, f)
	ids := map[string]uint32{}
	for _, s := range sets {
		set := &nftables.Set{Table: table, Name: s.name, KeyType: s.keyType, Interval: true}
		if err := c.AddSet(set, nil); err != nil {
			return fmt.Errorf("nftables: %s set %s: %w", f.name, s.name, err)
		}
		// The elements go in messages of setElementsPerMessage each, in
		// the same transaction: the library puts a message's elements
		// in one netlink attribute, whose length is 16 bits and wraps
		// past 64 KiB unchecked. 4,000 elements in one (2,000 client
		// hosts) left the kernel a set cut short whose last range never
		// closed, diverting every source above it.
		for from := 0; from < len(s.elements); from += setElementsPerMessage {
			chunk := s.elements[from:min(from+setElementsPerMessage, len(s.elements))]
			if err := c.SetAddElements(set, chunk); err != nil {
				return fmt.Errorf("nftables: %s set %s: %w", f.name, s.name, err)
			}
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
	return nil
}

// readSteeringSets reads every set of one steering table with its
// elements.
func readSteeringSets(c *nftables.Conn, f nftFamily) (map[string]nftSet, error) {
	sets, err := c.GetSets(steeringTable(f))
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
	queued := false
	for _, f := range nftFamilies {
		exists, err := steeringTableExists(c, f)
		if err != nil {
			return err
		}
		if exists {
			c.DelTable(steeringTable(f))
			queued = true
		}
	}
	if !queued {
		return nil
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: delete table %s: %w", SteeringTable, err)
	}
	return nil
}

// ipv6Enabled reports whether this network namespace runs IPv6 on an up
// loopback, where the IPv6 steering route lives (the kernel refuses it on
// a loopback that is down). Without it only the IPv4 rule and route are
// converged and observed.
func ipv6Enabled() bool {
	b, err := os.ReadFile("/proc/sys/net/ipv6/conf/lo/disable_ipv6")
	if err != nil || strings.TrimSpace(string(b)) != "0" {
		return false
	}
	lo, err := netlink.LinkByName("lo")
	return err == nil && lo.Attrs().Flags&net.FlagUp != 0
}

// routeFamilies are the address families steering routes packets of.
func routeFamilies() []int {
	if ipv6Enabled() {
		return []int{netlink.FAMILY_V4, netlink.FAMILY_V6}
	}
	return []int{netlink.FAMILY_V4}
}

func familyName(family int) string {
	if family == netlink.FAMILY_V6 {
		return "ipv6"
	}
	return "ipv4"
}

// ownRules lists the policy rules of one family tagged with
// SteeringProtocol.
func ownRules(family int) ([]netlink.Rule, error) {
	all, err := netlink.RuleList(family)
	if err != nil {
		return nil, fmt.Errorf("list %s policy rules: %w", familyName(family), err)
	}
	var ours []netlink.Rule
	for _, r := range all {
		if r.Protocol == SteeringProtocol {
			ours = append(ours, r)
		}
	}
	return ours, nil
}

// familyValues joins what each family holds: the IPv4 value, and where
// IPv6 holds something else, that too, so that the value equals the
// desired one only when both families carry it.
func familyValues(values map[int][]string) (string, bool) {
	v4 := strings.Join(values[netlink.FAMILY_V4], "; ")
	if len(values[netlink.FAMILY_V4])+len(values[netlink.FAMILY_V6]) == 0 {
		return "", false
	}
	if fs := routeFamilies(); len(fs) == 2 {
		if v6 := strings.Join(values[netlink.FAMILY_V6], "; "); v6 != v4 {
			if v6 == "" {
				v6 = "(none)"
			}
			return v4 + " | ipv6: " + v6, true
		}
	}
	return v4, true
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
	values := map[int][]string{}
	for _, fam := range routeFamilies() {
		ours, err := ownRules(fam)
		if err != nil {
			return "", false, err
		}
		for _, r := range ours {
			values[fam] = append(values[fam], ruleValue(r))
		}
		slices.Sort(values[fam])
	}
	v, ok := familyValues(values)
	return v, ok, nil
}

// allFamilies are the families whose rules and routes steering deletes:
// both, whatever IPv6 is now, so that a rule made while IPv6 ran does not
// outlive a rollback made after it was turned off (the kernel keeps policy
// rules of a family whose loopback lost IPv6).
var allFamilies = []int{netlink.FAMILY_V4, netlink.FAMILY_V6}

// ownRulesOf is ownRules for a deletion: a family the kernel has no
// IPv6 for (ipv6.disable=1) holds none.
func ownRulesOf(fam int) ([]netlink.Rule, error) {
	ours, err := ownRules(fam)
	if fam == netlink.FAMILY_V6 && errors.Is(err, unix.EAFNOSUPPORT) {
		return nil, nil
	}
	return ours, err
}

// deleteSteeringRules deletes our rules of both families but those keep
// keeps (nil: all).
func deleteSteeringRules(keep func(netlink.Rule) bool) error {
	for _, fam := range allFamilies {
		ours, err := ownRulesOf(fam)
		if err != nil {
			return err
		}
		for _, r := range ours {
			if keep != nil && keep(r) {
				continue
			}
			if err := netlink.RuleDel(&r); err != nil && !errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("delete %s policy rule %s: %w", familyName(fam), ruleValue(r), err)
			}
		}
	}
	return nil
}

// liveMark is the mark the live steering table sets on the packets it
// diverts, 0 without a table. known is false when a table is there that
// sosappliance cannot read (or reading failed): it may set any mark.
func liveMark() (mark uint32, known bool) {
	v, present, err := observeSteeringTable()
	if err != nil {
		return 0, false
	}
	if !present {
		return 0, true
	}
	t, err := item.ParseTproxyRules(v)
	if err != nil {
		return 0, false
	}
	return t.Mark, true
}

// applySteeringRule makes before it breaks: the rule wanted is added
// first; a rule of ours for the mark the live table still sets (a mark
// being changed) stays until the table sets the new one
// (applySteeringTable removes it then), since without it packets of
// connections already diverted would lose their local route; any other
// rule of ours goes, and so do our routes no rule of ours looks up any
// more. (The plan converges the route first, then the rule, then the
// table.)
func applySteeringRule(want item.SteeringRule) error {
	if err := checkForeignRules(want, ""); err != nil {
		return err
	}
	for _, fam := range routeFamilies() {
		ours, err := ownRules(fam)
		if err != nil {
			return err
		}
		if slices.ContainsFunc(ours, func(r netlink.Rule) bool { return ruleValue(r) == want.String() }) {
			continue
		}
		r := netlink.NewRule()
		r.Family = fam
		r.Mark = want.Mark
		mask := uint32(0xffffffff)
		r.Mask = &mask
		r.Table = int(want.Table)
		r.Priority = int(want.Priority)
		r.Protocol = SteeringProtocol
		if err := netlink.RuleAdd(r); err != nil {
			return fmt.Errorf("add %s policy rule %s: %w", familyName(fam), want, err)
		}
	}
	// A table it cannot read may set any mark: every rule of ours stays
	// until the table step has written the table.
	live, known := liveMark()
	err := deleteSteeringRules(func(r netlink.Rule) bool {
		return ruleValue(r) == want.String() || r.Mark != want.Mark && (r.Mark == live || !known)
	})
	if err != nil {
		return err
	}
	return pruneSteeringRoutes(nil)
}

// ownRoutes lists the routes of one family in any table tagged with
// SteeringProtocol.
func ownRoutes(family int) ([]netlink.Route, error) {
	routes, err := netlink.RouteListFiltered(family,
		&netlink.Route{Table: unix.RT_TABLE_UNSPEC, Protocol: netlink.RouteProtocol(SteeringProtocol)},
		netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		return nil, fmt.Errorf("list %s routes: %w", familyName(family), err)
	}
	return routes, nil
}

// routeValue writes the local default route of either family in the
// canonical (IPv4) words, so both families compare with one value.
func routeValue(r netlink.Route) string {
	lo, _ := netlink.LinkByName("lo")
	isDefault := r.Dst == nil || ((r.Dst.IP.Equal(net.IPv4zero) || r.Dst.IP.Equal(net.IPv6zero)) && isZeroMask(r.Dst.Mask))
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
	values := map[int][]string{}
	for _, fam := range routeFamilies() {
		ours, err := ownRoutes(fam)
		if err != nil {
			return "", false, err
		}
		for _, r := range ours {
			values[fam] = append(values[fam], routeValue(r))
		}
		slices.Sort(values[fam])
	}
	v, ok := familyValues(values)
	return v, ok, nil
}

// deleteSteeringRoutes deletes our routes of both families but keep
// (nil: all) and, with inUse, those a rule of ours still looks up.
func deleteSteeringRoutes(keep *item.SteeringRoute, inUse bool) error {
	for _, fam := range allFamilies {
		ours, err := ownRoutes(fam)
		if fam == netlink.FAMILY_V6 && errors.Is(err, unix.EAFNOSUPPORT) {
			continue
		}
		if err != nil {
			return err
		}
		used := map[int]bool{}
		if inUse {
			rules, err := ownRulesOf(fam)
			if err != nil {
				return err
			}
			for _, r := range rules {
				used[r.Table] = true
			}
		}
		for _, r := range ours {
			// A route of ours a rule looks up stays if it is one
			// steering writes; a stray one in that table goes.
			_, wellFormed := item.ParseSteeringRoute(routeValue(r))
			if keep != nil && routeValue(r) == keep.String() || used[r.Table] && wellFormed == nil {
				continue
			}
			if err := netlink.RouteDel(&r); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("delete %s route %s: %w", familyName(fam), routeValue(r), err)
			}
		}
	}
	return nil
}

// pruneSteeringRoutes deletes our routes no rule of ours looks up any
// more, but keep.
func pruneSteeringRoutes(keep *item.SteeringRoute) error { return deleteSteeringRoutes(keep, true) }

// foreignRoute names a route of table in family fam that is not ours, ""
// when there is none: the operator's own TPROXY recipe (`ip route add
// local 0.0.0.0/0 dev lo table 100`), their own policy routing's routes,
// or another tool's. Steering's local default route would catch whatever
// a rule of theirs sends to the table and their routes do not.
func foreignRoute(fam int, table uint32) (string, error) {
	routes, err := netlink.RouteListFiltered(fam, &netlink.Route{Table: int(table)}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return "", fmt.Errorf("list %s routes of table %d: %w", familyName(fam), table, err)
	}
	for _, r := range routes {
		if r.Protocol != netlink.RouteProtocol(SteeringProtocol) {
			return describeRoute(r), nil
		}
	}
	return "", nil
}

// describeRoute writes a route about as `ip route` does.
func describeRoute(r netlink.Route) string {
	dst := "default"
	if r.Dst != nil && !isZeroMask(r.Dst.Mask) {
		dst = r.Dst.String()
	}
	typ := map[int]string{unix.RTN_UNICAST: "unicast", unix.RTN_LOCAL: "local", unix.RTN_BLACKHOLE: "blackhole",
		unix.RTN_UNREACHABLE: "unreachable", unix.RTN_PROHIBIT: "prohibit"}[r.Type]
	if typ == "" {
		typ = fmt.Sprintf("type %d", r.Type)
	}
	via := ""
	if r.Gw != nil {
		via = " via " + r.Gw.String()
	}
	if l, err := netlink.LinkByIndex(r.LinkIndex); err == nil {
		via += " dev " + l.Attrs().Name
	}
	return fmt.Sprintf("%s %s%s table %d proto %d", typ, dst, via, r.Table, r.Protocol)
}

// checkForeignRoutes refuses a route table whose default route is not
// ours: steering would replace it, and a rollback then delete it.
func checkForeignRoutes(want item.SteeringRoute, origin string) error {
	for _, fam := range routeFamilies() {
		r, err := foreignRoute(fam, want.Table)
		if err != nil {
			return err
		}
		if r != "" {
			return fmt.Errorf("route table %d, steering's, already holds an %s route sosappliance did not make (%s): steering needs the table to itself; set another steering_table on %s, or move that route to another table",
				want.Table, familyName(fam), r, agentOf(origin))
		}
	}
	return nil
}

// checkForeignRules refuses policy rules that are not ours and would
// meet steering's: one that looks up its table (its packets would be
// taken for steered ones and delivered locally) or one that matches its
// mark (steered packets would follow it, or its packets steering's rule,
// whichever comes first). A rule that does just what steering's does,
// the operator's own copy, is no conflict.
func checkForeignRules(want item.SteeringRule, origin string) error {
	for _, fam := range routeFamilies() {
		rules, err := netlink.RuleList(fam)
		if err != nil {
			return fmt.Errorf("list %s policy rules: %w", familyName(fam), err)
		}
		for _, r := range rules {
			if r.Protocol == SteeringProtocol || sameAsSteering(r, want) {
				continue
			}
			mask := uint32(0xffffffff)
			if r.Mask != nil {
				mask = *r.Mask
			}
			// A rule with no fwmark selector has mark and mask 0. One
			// for packets *not* of a mark (wg-quick's "not fwmark
			// 0xca6c") meets steering's packets only where it looks up
			// steering's table.
			marks := (r.Mark != 0 || r.Mask != nil && *r.Mask != 0) && want.Mark&mask == r.Mark && !r.Invert
			switch {
			case r.Table == int(want.Table):
				return fmt.Errorf("%s policy rule %q, not sosappliance's, looks up route table %d, steering's: its packets would be delivered to this host; set another steering_table on %s",
					familyName(fam), r.String(), want.Table, agentOf(origin))
			case marks:
				return fmt.Errorf("%s policy rule %q, not sosappliance's, matches fwmark %#x, steering's: set another steering_mark on %s, one no rule or firewall of this node uses",
					familyName(fam), fmt.Sprintf("%s fwmark %#x/%#x", r, r.Mark, mask), want.Mark, agentOf(origin))
			}
		}
	}
	return nil
}

// agentOf names the agent a steering item's origin names ("agent a1"),
// or says "the agent" when it names none.
func agentOf(origin string) string {
	if strings.HasPrefix(origin, "agent ") {
		return origin
	}
	return "the agent"
}

// sameAsSteering says whether r sends packets of want's mark, and only
// those, to want's table, as steering's own rule does.
func sameAsSteering(r netlink.Rule, want item.SteeringRule) bool {
	return r.Mark == want.Mark && (r.Mask == nil || *r.Mask == 0xffffffff) && r.Table == int(want.Table) &&
		r.Src == nil && r.Dst == nil && r.IifName == "" && r.OifName == "" && !r.Invert &&
		(r.Type == 0 || r.Type == unix.FR_ACT_TO_TBL) && r.Tos == 0 && r.Goto <= 0
}

// applySteeringRoute adds the route wanted, never over one that is not
// ours (checkForeignRoutes), and deletes our others but those a rule of
// ours still looks up (a route table being changed: applySteeringRule
// deletes them once it moved).
func applySteeringRoute(want item.SteeringRoute) error {
	if err := checkForeignRoutes(want, ""); err != nil {
		return err
	}
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	for _, fam := range routeFamilies() {
		ours, err := ownRoutes(fam)
		if err != nil {
			return err
		}
		if slices.ContainsFunc(ours, func(r netlink.Route) bool { return routeValue(r) == want.String() }) {
			continue
		}
		// A route of ours in the table that is not the one wanted (a
		// unicast default, say) would make the add fail: it goes first.
		for _, r := range ours {
			if r.Table == int(want.Table) {
				if err := netlink.RouteDel(&r); err != nil && !errors.Is(err, unix.ESRCH) {
					return fmt.Errorf("delete %s route %s: %w", familyName(fam), routeValue(r), err)
				}
			}
		}
		_, all, _ := net.ParseCIDR("0.0.0.0/0")
		if fam == netlink.FAMILY_V6 {
			_, all, _ = net.ParseCIDR("::/0")
		}
		r := &netlink.Route{
			LinkIndex: lo.Attrs().Index,
			Dst:       all,
			Table:     int(want.Table),
			Type:      unix.RTN_LOCAL,
			Scope:     netlink.SCOPE_HOST,
			Protocol:  netlink.RouteProtocol(SteeringProtocol),
		}
		// Add, not replace: the kernel replaces by table and
		// destination, whoever made the route.
		if err := netlink.RouteAdd(r); err != nil {
			return fmt.Errorf("add %s route %s: %w", familyName(fam), want, err)
		}
	}
	return pruneSteeringRoutes(&want)
}
