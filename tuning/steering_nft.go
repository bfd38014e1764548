package tuning

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/sosappliance/sosappliance/host/item"
	"github.com/sosappliance/sosappliance/internal/portrange"
)

// steeringChain is the one chain of the steering table.
const steeringChain = "prerouting"

// ruleTag is the user data of every rule the appliance writes; a rule
// without it was not made by us and makes the table unrecognised.
var ruleTag = []byte("sosappliance")

// reg is the register our expressions use; regDev holds the interface a
// pass rule sends its packet out of, beside the address in reg.
const (
	reg    = 1
	regDev = 2
)

// nftFamily is one of the two steering tables: ip for IPv4 diverts, ip6
// for IPv6 ones. Both hold the transparent-socket rule.
type nftFamily struct {
	name         string // "ip" or "ip6", as nft writes it
	table        nftables.TableFamily
	proto        byte // NFPROTO_IPV4 or NFPROTO_IPV6
	is4          bool
	addrLen      uint32 // bytes of an address
	saddr, daddr uint32 // their offsets in the network header
	ttl          uint32 // the offset of the TTL (IPv4) or hop limit (IPv6)
	addrType     nftables.SetDatatype
}

var (
	ipv4Family = nftFamily{name: "ip", table: nftables.TableFamilyIPv4, proto: unix.NFPROTO_IPV4, is4: true,
		addrLen: 4, saddr: 12, daddr: 16, ttl: 8, addrType: nftables.TypeIPAddr}
	ipv6Family = nftFamily{name: "ip6", table: nftables.TableFamilyIPv6, proto: unix.NFPROTO_IPV6,
		addrLen: 16, saddr: 8, daddr: 24, ttl: 7, addrType: nftables.TypeIP6Addr}
	// nftFamilies are the steering tables, each written and read alike.
	nftFamilies = []nftFamily{ipv4Family, ipv6Family}
)

func steeringTable(f nftFamily) *nftables.Table {
	return &nftables.Table{Name: SteeringTable, Family: f.table}
}

func steeringChainSpec(t *nftables.Table) *nftables.Chain {
	accept := nftables.ChainPolicyAccept
	return &nftables.Chain{
		Name:     steeringChain,
		Table:    t,
		Type:     nftables.ChainTypeFilter,
		Hooknum:  nftables.ChainHookPrerouting,
		Priority: nftables.ChainPriorityMangle,
		Policy:   &accept,
	}
}

// ifnameData is how an interface name is compared: the kernel's IFNAMSIZ
// bytes, NUL padded.
func ifnameData(name string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return b
}

// steeringSet is one named interval set of the steering table: the
// client or server addresses, or the ports, of one divert rule.
type steeringSet struct {
	name     string
	keyType  nftables.SetDatatype
	elements []nftables.SetElement
}

// Set name stems; divert rule i looks up clientsI, serversI and portsI.
const (
	setClients = "clients"
	setServers = "servers"
	setPorts   = "ports"
	// setSteered holds every source the switches steer here: the
	// diverts' clients and the replies' servers.
	setSteered = "steered"
	// A reply's sets: its servers are the packets' sources.
	setReplyServers = "rservers"
	setReplyClients = "rclients"
	setReplyPorts   = "rports"
)

// The TCP flags byte, and the flags that tell a connection's first SYN
// from every later segment: SYN set, and FIN, RST and ACK clear.
const (
	tcpFlagsOffset = 13
	tcpOpeningMask = 0x17 // FIN | SYN | RST | ACK
	tcpSYN         = 0x02
)

// addrElements are the interval set elements of prefixes: the start of
// each merged run, and the address after its end flagged as an interval
// end (left out when the run reaches the last address).
func addrElements(ps []netip.Prefix) []nftables.SetElement {
	var out []nftables.SetElement
	for _, r := range item.PrefixRanges(ps) {
		out = append(out, nftables.SetElement{Key: r.Lo.AsSlice()})
		if next := r.Hi.Next(); next.IsValid() {
			out = append(out, nftables.SetElement{Key: next.AsSlice(), IntervalEnd: true})
		}
	}
	return out
}

// portElements are the interval set elements of port ranges.
func portElements(rs []portrange.Range) []nftables.SetElement {
	var out []nftables.SetElement
	for _, r := range portrange.Normalize(rs) {
		out = append(out, nftables.SetElement{Key: binaryutil.BigEndian.PutUint16(r.Lo)})
		if r.Hi < 0xffff {
			out = append(out, nftables.SetElement{Key: binaryutil.BigEndian.PutUint16(r.Hi + 1), IntervalEnd: true})
		}
	}
	return out
}

// steeringRuleExprs builds the sets and the chain, in order:
//
//	iifname != IF accept                      (with an interface and a divert or reply)
//	ip saddr != @steered accept                               (with a divert or reply)
//	meta l4proto tcp socket transparent 1 meta mark set MARK accept
//	[iifname IF] meta l4proto tcp ip saddr @clientsI ip daddr @serversI
//	    tcp dport @portsI tcp flags & (fin|syn|rst|ack) == syn
//	    meta mark set MARK tproxy ip to :LISTEN accept                 (per divert)
//	[iifname IF] meta l4proto tcp ip saddr @clientsI ip daddr @serversI
//	    tcp dport @portsI fib daddr type unicast ip ttl > 1
//	    dup to ip daddr device iif drop                                  (per divert)
//	[iifname IF] meta l4proto tcp ip saddr @rserversJ ip daddr @rclientsJ
//	    tcp sport @rportsJ fib daddr type unicast ip ttl > 1
//	    dup to ip daddr device iif drop                                  (per reply)
//
// The first rule catches packets of connections the relay already owns
// (accepted from TPROXY, or opened with IP_TRANSPARENT toward a server); the
// divert rules send the SYNs that open new whitelisted connections to the
// relay's listener. The pass rules send every other packet the switch
// steered here on to where it was going, out of the interface it came in
// by: the switches' flows cannot tell a reply from a packet of a
// connection the server opened, nor a client's SYN from its SYN-ACK, and
// such packets belong to no relay socket (DESIGN.md section 3). Client and
// server addresses and ports are interval sets, so a port range or a list
// of prefixes is one rule and one set lookup, never a rule per port. A
// divert's pass rule looks up the divert's sets. Lookups name their set;
// the caller fills in set ids when it adds them.
func steeringRuleExprs(t item.TproxyRules, f nftFamily) ([]steeringSet, [][]expr.Any) {
	// Each rule gets its own expression values; none are shared.
	tcp := func() []expr.Any {
		return []expr.Any{
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg, Data: []byte{unix.IPPROTO_TCP}},
		}
	}
	setMark := func() []expr.Any {
		return []expr.Any{
			&expr.Immediate{Register: reg, Data: binaryutil.NativeEndian.PutUint32(t.Mark)},
			&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: reg},
		}
	}
	socket := append(tcp(),
		&expr.Socket{Key: expr.SocketKeyTransparent, Register: reg},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg, Data: []byte{1}})
	socket = append(socket, setMark()...)
	var rules [][]expr.Any
	var sets []steeringSet
	// Traffic that no switch steers here leaves the chain at once:
	// everything from another interface, and everything from a source
	// that is neither a client of the diverts nor a server of the
	// replies (the relay's stripes among it). Only steered sources get
	// the socket lookup and the whitelists' rules: without this, each
	// whitelist's rules cost every packet of the stripes (helper-113:
	// 0.67x the throughput of the table before the pass rules, with the
	// packets not merged by GRO).
	var steered []netip.Prefix
	for _, d := range t.Divert {
		if len(d.Servers) > 0 && d.Servers[0].Addr().Is4() == f.is4 {
			steered = append(steered, d.Clients...)
		}
	}
	for _, d := range t.Replies {
		if len(d.Servers) > 0 && d.Servers[0].Addr().Is4() == f.is4 {
			steered = append(steered, d.Servers...)
		}
	}
	if len(steered) > 0 {
		if t.Interface != "" {
			rules = append(rules, []expr.Any{
				&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: reg},
				&expr.Cmp{Op: expr.CmpOpNeq, Register: reg, Data: ifnameData(t.Interface)},
				&expr.Verdict{Kind: expr.VerdictAccept},
			})
		}
		sets = append(sets, steeringSet{setSteered, f.addrType, addrElements(item.NormalizePrefixes(steered))})
		rules = append(rules, []expr.Any{
			&expr.Payload{DestRegister: reg, Base: expr.PayloadBaseNetworkHeader, Offset: f.saddr, Len: f.addrLen},
			&expr.Lookup{SourceRegister: reg, SetName: setSteered, Invert: true},
			&expr.Verdict{Kind: expr.VerdictAccept},
		})
	}
	rules = append(rules, append(socket, &expr.Verdict{Kind: expr.VerdictAccept}))
	// match is a rule's start: the interface, TCP, and the packet's
	// source, destination and port (source or destination) in three sets.
	match := func(src, dst, port string, portOffset uint32) []expr.Any {
		var r []expr.Any
		if t.Interface != "" {
			r = append(r,
				&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: reg},
				&expr.Cmp{Op: expr.CmpOpEq, Register: reg, Data: ifnameData(t.Interface)})
		}
		r = append(r, tcp()...)
		return append(r,
			&expr.Payload{DestRegister: reg, Base: expr.PayloadBaseNetworkHeader, Offset: f.saddr, Len: f.addrLen},
			&expr.Lookup{SourceRegister: reg, SetName: src},
			&expr.Payload{DestRegister: reg, Base: expr.PayloadBaseNetworkHeader, Offset: f.daddr, Len: f.addrLen},
			&expr.Lookup{SourceRegister: reg, SetName: dst},
			&expr.Payload{DestRegister: reg, Base: expr.PayloadBaseTransportHeader, Offset: portOffset, Len: 2},
			&expr.Lookup{SourceRegister: reg, SetName: port},
		)
	}
	pass := func(r []expr.Any) []expr.Any {
		return append(r,
			// A unicast destination that is not this host's: never a
			// broadcast or multicast one, whose copy would come back
			// to this chain.
			&expr.Fib{Register: reg, FlagDADDR: true, ResultADDRTYPE: true},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg, Data: binaryutil.NativeEndian.PutUint32(unix.RTN_UNICAST)},
			// As a router would: dup takes one off the TTL (hop
			// limit) in prerouting, without looking at it.
			&expr.Payload{DestRegister: reg, Base: expr.PayloadBaseNetworkHeader, Offset: f.ttl, Len: 1},
			&expr.Cmp{Op: expr.CmpOpGt, Register: reg, Data: []byte{1}},
			&expr.Payload{DestRegister: reg, Base: expr.PayloadBaseNetworkHeader, Offset: f.daddr, Len: f.addrLen},
			&expr.Meta{Key: expr.MetaKeyIIF, Register: regDev},
			&expr.Dup{RegAddr: reg, RegDev: regDev, IsRegDevSet: true},
			&expr.Verdict{Kind: expr.VerdictDrop},
		)
	}
	var passes [][]expr.Any
	i := -1
	for _, d := range t.Divert {
		if len(d.Servers) == 0 || d.Servers[0].Addr().Is4() != f.is4 {
			continue
		}
		i++
		n := strconv.Itoa(i)
		sets = append(sets,
			steeringSet{setClients + n, f.addrType, addrElements(d.Clients)},
			steeringSet{setServers + n, f.addrType, addrElements(d.Servers)},
			steeringSet{setPorts + n, nftables.TypeInetService, portElements(d.Ports)})
		r := match(setClients+n, setServers+n, setPorts+n, 2)
		r = append(r,
			&expr.Payload{DestRegister: reg, Base: expr.PayloadBaseTransportHeader, Offset: tcpFlagsOffset, Len: 1},
			&expr.Bitwise{SourceRegister: reg, DestRegister: reg, Len: 1, Mask: []byte{tcpOpeningMask}, Xor: []byte{0}},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg, Data: []byte{tcpSYN}},
		)
		r = append(r, setMark()...)
		r = append(r,
			&expr.Immediate{Register: reg, Data: binaryutil.BigEndian.PutUint16(t.ListenPort)},
			&expr.TProxy{Family: f.proto, TableFamily: f.proto, RegPort: reg},
			&expr.Verdict{Kind: expr.VerdictAccept},
		)
		rules = append(rules, r)
		passes = append(passes, pass(match(setClients+n, setServers+n, setPorts+n, 2)))
	}
	rules = append(rules, passes...)
	j := -1
	for _, d := range t.Replies {
		if len(d.Servers) == 0 || d.Servers[0].Addr().Is4() != f.is4 {
			continue
		}
		j++
		n := strconv.Itoa(j)
		sets = append(sets,
			steeringSet{setReplyServers + n, f.addrType, addrElements(d.Servers)},
			steeringSet{setReplyClients + n, f.addrType, addrElements(d.Clients)},
			steeringSet{setReplyPorts + n, nftables.TypeInetService, portElements(d.Ports)})
		rules = append(rules, pass(match(setReplyServers+n, setReplyClients+n, setReplyPorts+n, 0)))
	}
	return sets, rules
}

// setIntervals reads interval set elements back into [lo, hi] pairs of
// keys of size n: each start, up to the key before the interval end that
// follows it, or to the last key when none follows.
func setIntervals(elems []nftables.SetElement, n int) ([][2][]byte, error) {
	sorted := slices.Clone(elems)
	slices.SortStableFunc(sorted, func(a, b nftables.SetElement) int {
		if c := bytes.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		// An end and a start on one key: the end closes the run before.
		if a.IntervalEnd != b.IntervalEnd {
			if a.IntervalEnd {
				return -1
			}
			return 1
		}
		return 0
	})
	var out [][2][]byte
	for i := 0; i < len(sorted); i++ {
		e := sorted[i]
		if len(e.Key) != n {
			return nil, fmt.Errorf("set element of %d bytes, want %d", len(e.Key), n)
		}
		if e.IntervalEnd {
			// The kernel may report the implicit end before the first
			// start (key 0); any other lone end is not ours.
			if !bytes.Equal(e.Key, make([]byte, n)) || len(out) > 0 {
				return nil, fmt.Errorf("interval end %x without a start", e.Key)
			}
			continue
		}
		hi := bytes.Repeat([]byte{0xff}, n)
		if i+1 < len(sorted) {
			next := sorted[i+1]
			if !next.IntervalEnd {
				return nil, fmt.Errorf("interval start %x without an end before %x", e.Key, next.Key)
			}
			if len(next.Key) != n {
				return nil, fmt.Errorf("set element of %d bytes, want %d", len(next.Key), n)
			}
			hi = decrement(next.Key)
			i++
		}
		out = append(out, [2][]byte{e.Key, hi})
	}
	return out, nil
}

// decrement is the big-endian number one below b (b is not zero).
func decrement(b []byte) []byte {
	out := slices.Clone(b)
	for i := len(out) - 1; i >= 0; i-- {
		out[i]--
		if out[i] != 0xff {
			break
		}
	}
	return out
}

// setPrefixes reads an address interval set of n-byte addresses back as
// prefixes.
func setPrefixes(elems []nftables.SetElement, n int) ([]netip.Prefix, error) {
	ivs, err := setIntervals(elems, n)
	if err != nil {
		return nil, err
	}
	var out []netip.Prefix
	for _, iv := range ivs {
		lo, _ := netip.AddrFromSlice(iv[0])
		hi, _ := netip.AddrFromSlice(iv[1])
		out = append(out, item.AddrRange{Lo: lo, Hi: hi}.Prefixes()...)
	}
	return out, nil
}

// setPorts reads a port interval set back as ranges.
func setPortRanges(elems []nftables.SetElement) ([]portrange.Range, error) {
	ivs, err := setIntervals(elems, 2)
	if err != nil {
		return nil, err
	}
	var out []portrange.Range
	for _, iv := range ivs {
		out = append(out, portrange.Range{Lo: binary.BigEndian.Uint16(iv[0]), Hi: binary.BigEndian.Uint16(iv[1])})
	}
	return out, nil
}

// dumpedRule is one rule as read from the kernel. google/nftables skips
// expressions it cannot decode (tproxy among them) without a word, which
// would make a foreign or half-written rule look like ours, so the steering
// executor reads rules itself and keeps the name of every expression.
type dumpedRule struct {
	exprs    []expr.Any
	unknown  []string // names of expressions not decoded
	userData []byte
}

// dumpRules reads the rules of one chain of a table of family f.
func dumpRules(f nftFamily, table, chain string) ([]dumpedRule, error) {
	conn, err := netlink.Dial(unix.NETLINK_NETFILTER, nil)
	if err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	defer conn.Close()
	attrs, err := netlink.MarshalAttributes([]netlink.Attribute{
		{Type: unix.NFTA_RULE_TABLE, Data: []byte(table + "\x00")},
		{Type: unix.NFTA_RULE_CHAIN, Data: []byte(chain + "\x00")},
	})
	if err != nil {
		return nil, err
	}
	msgs, err := conn.Execute(netlink.Message{
		Header: netlink.Header{
			Type:  netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETRULE),
			Flags: netlink.Request | netlink.Dump,
		},
		Data: append([]byte{f.proto, unix.NFNETLINK_V0, 0, 0}, attrs...),
	})
	if err != nil {
		return nil, fmt.Errorf("nftables: list rules of %s %s: %w", table, chain, err)
	}
	var rules []dumpedRule
	for _, m := range msgs {
		if len(m.Data) < 4 {
			continue
		}
		r, err := decodeRuleMsg(m.Data[4:], f.proto)
		if err != nil {
			return nil, fmt.Errorf("nftables: decode rule of %s %s: %w", table, chain, err)
		}
		rules = append(rules, r)
	}
	return rules, nil
}

func decodeRuleMsg(b []byte, proto byte) (dumpedRule, error) {
	var r dumpedRule
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return r, err
	}
	ad.ByteOrder = binary.BigEndian
	for ad.Next() {
		switch ad.Type() {
		case unix.NFTA_RULE_USERDATA:
			r.userData = ad.Bytes()
		case unix.NFTA_RULE_EXPRESSIONS:
			ad.Nested(func(list *netlink.AttributeDecoder) error {
				for list.Next() {
					list.Nested(func(one *netlink.AttributeDecoder) error {
						return decodeExpr(one, &r, proto)
					})
				}
				return nil
			})
		}
	}
	return r, ad.Err()
}

func decodeExpr(ad *netlink.AttributeDecoder, r *dumpedRule, proto byte) error {
	var name string
	var data []byte
	for ad.Next() {
		switch ad.Type() {
		case unix.NFTA_EXPR_NAME:
			name = ad.String()
		case unix.NFTA_EXPR_DATA:
			data = ad.Bytes()
		}
	}
	var e expr.Any
	switch name {
	case "meta":
		e = &expr.Meta{}
	case "cmp":
		e = &expr.Cmp{}
	case "payload":
		e = &expr.Payload{}
	case "bitwise":
		e = &expr.Bitwise{}
	case "socket":
		e = &expr.Socket{}
	case "immediate":
		e = &expr.Immediate{}
	case "lookup":
		e = &expr.Lookup{}
	case "fib":
		e = &expr.Fib{}
	case "dup":
		d := &expr.Dup{}
		if err := expr.Unmarshal(proto, data, d); err != nil {
			return fmt.Errorf("dup expression: %w", err)
		}
		// google/nftables reads the device register but does not say
		// it was there.
		d.IsRegDevSet = d.RegDev != 0
		r.exprs = append(r.exprs, d)
		return nil
	case "tproxy":
		tp, err := decodeTproxy(data)
		if err != nil {
			return err
		}
		r.exprs = append(r.exprs, tp)
		return nil
	default:
		r.unknown = append(r.unknown, name)
		return nil
	}
	if err := expr.Unmarshal(proto, data, e); err != nil {
		return fmt.Errorf("%s expression: %w", name, err)
	}
	// A verdict is an immediate into the verdict register.
	if imm, ok := e.(*expr.Immediate); ok && imm.Register == unix.NFT_REG_VERDICT && len(imm.Data) == 0 {
		v := &expr.Verdict{}
		if err := expr.Unmarshal(proto, data, v); err != nil {
			return fmt.Errorf("verdict: %w", err)
		}
		e = v
	}
	r.exprs = append(r.exprs, e)
	return nil
}

// decodeTproxy reads the kernel's tproxy attributes, which are 32-bit
// (google/nftables v0.3.0 expects an 8-bit family and cannot read them).
func decodeTproxy(b []byte) (*expr.TProxy, error) {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return nil, err
	}
	ad.ByteOrder = binary.BigEndian
	tp := &expr.TProxy{}
	for ad.Next() {
		switch ad.Type() {
		case expr.NFTA_TPROXY_FAMILY:
			tp.Family = byte(ad.Uint32())
		case expr.NFTA_TPROXY_REG_ADDR:
			tp.RegAddr = ad.Uint32()
		case expr.NFTA_TPROXY_REG_PORT:
			tp.RegPort = ad.Uint32()
		}
	}
	return tp, ad.Err()
}

// parsedRule is what one of our rules says.
type parsedRule struct {
	iifname     string
	tcp         bool
	transparent bool
	// The sets the rule looks up source, destination and port in.
	saddrSet, daddrSet, dportSet, sportSet string
	mark                                   uint32
	hasMark                                bool
	tproxyPort                             uint16
	// opening: only a connection's first SYN; notLocal: fib daddr type
	// unicast (not this host's, nor broadcast or multicast); ttl: ip ttl
	// (ip6 hoplimit) > 1; dup: sent on to its destination, out of its
	// interface.
	opening, notLocal, ttl, dup bool
	accept, drop                bool
}

// parseSteeringRule recognises the rule shapes steeringRuleExprs makes;
// anything else is an error saying what was not understood.
func parseSteeringRule(exprs []expr.Any, f nftFamily) (parsedRule, error) {
	var p parsedRule
	bad := func(i int) (parsedRule, error) {
		return parsedRule{}, fmt.Errorf("expression %d (%T) is not one sosappliance writes", i+1, exprs[i])
	}
	for i := 0; i < len(exprs); i++ {
		next := func() expr.Any {
			if i+1 < len(exprs) {
				return exprs[i+1]
			}
			return nil
		}
		switch e := exprs[i].(type) {
		case *expr.Meta:
			cmp, ok := next().(*expr.Cmp)
			if e.SourceRegister || !ok || cmp.Op != expr.CmpOpEq || cmp.Register != e.Register {
				return bad(i)
			}
			switch {
			case e.Key == expr.MetaKeyL4PROTO && bytes.Equal(cmp.Data, []byte{unix.IPPROTO_TCP}):
				p.tcp = true
			case e.Key == expr.MetaKeyIIFNAME && len(cmp.Data) > 0:
				p.iifname = string(bytes.TrimRight(cmp.Data, "\x00"))
			default:
				return bad(i)
			}
			i++
		case *expr.Socket:
			cmp, ok := next().(*expr.Cmp)
			if e.Key != expr.SocketKeyTransparent || !ok || cmp.Op != expr.CmpOpEq || cmp.Register != e.Register || !bytes.Equal(cmp.Data, []byte{1}) {
				return bad(i)
			}
			p.transparent = true
			i++
		case *expr.Payload:
			if e.OperationType != expr.PayloadLoad {
				return bad(i)
			}
			// The pass rule's end: the destination address and the
			// interface the packet came in by, and dup to them.
			if m, ok := next().(*expr.Meta); ok {
				var d *expr.Dup
				if i+2 < len(exprs) {
					d, _ = exprs[i+2].(*expr.Dup)
				}
				if e.Base != expr.PayloadBaseNetworkHeader || e.Offset != f.daddr || e.Len != f.addrLen ||
					m.Key != expr.MetaKeyIIF || m.SourceRegister || m.Register == e.DestRegister || d == nil ||
					d.RegAddr != e.DestRegister || d.RegDev != m.Register || p.dup {
					return bad(i)
				}
				p.dup = true
				i += 2
				continue
			}
			if b, ok := next().(*expr.Bitwise); ok {
				var c *expr.Cmp
				if i+2 < len(exprs) {
					c, _ = exprs[i+2].(*expr.Cmp)
				}
				if e.Base != expr.PayloadBaseTransportHeader || e.Offset != tcpFlagsOffset || e.Len != 1 ||
					b.SourceRegister != e.DestRegister || b.DestRegister != e.DestRegister || b.Len != 1 ||
					!bytes.Equal(b.Mask, []byte{tcpOpeningMask}) || !bytes.Equal(b.Xor, []byte{0}) ||
					c == nil || c.Op != expr.CmpOpEq || c.Register != e.DestRegister || !bytes.Equal(c.Data, []byte{tcpSYN}) || p.opening {
					return bad(i)
				}
				p.opening = true
				i += 2
				continue
			}
			if c, ok := next().(*expr.Cmp); ok {
				if e.Base != expr.PayloadBaseNetworkHeader || e.Offset != f.ttl || e.Len != 1 || c.Op != expr.CmpOpGt ||
					c.Register != e.DestRegister || !bytes.Equal(c.Data, []byte{1}) || p.ttl {
					return bad(i)
				}
				p.ttl = true
				i++
				continue
			}
			lk, ok := next().(*expr.Lookup)
			if !ok || lk.SourceRegister != e.DestRegister || lk.Invert || lk.IsDestRegSet || lk.SetName == "" {
				return bad(i)
			}
			switch {
			case e.Base == expr.PayloadBaseNetworkHeader && e.Offset == f.saddr && e.Len == f.addrLen && p.saddrSet == "":
				p.saddrSet = lk.SetName
			case e.Base == expr.PayloadBaseNetworkHeader && e.Offset == f.daddr && e.Len == f.addrLen && p.daddrSet == "":
				p.daddrSet = lk.SetName
			case e.Base == expr.PayloadBaseTransportHeader && e.Offset == 2 && e.Len == 2 && p.dportSet == "" && p.sportSet == "":
				p.dportSet = lk.SetName
			case e.Base == expr.PayloadBaseTransportHeader && e.Offset == 0 && e.Len == 2 && p.dportSet == "" && p.sportSet == "":
				p.sportSet = lk.SetName
			default:
				return bad(i)
			}
			i++
		case *expr.Fib:
			cmp, ok := next().(*expr.Cmp)
			want := expr.Fib{Register: e.Register, FlagDADDR: true, ResultADDRTYPE: true}
			if *e != want || !ok || cmp.Op != expr.CmpOpEq || cmp.Register != e.Register ||
				!bytes.Equal(cmp.Data, binaryutil.NativeEndian.PutUint32(unix.RTN_UNICAST)) || p.notLocal {
				return bad(i)
			}
			p.notLocal = true
			i++
		case *expr.Immediate:
			switch n := next().(type) {
			case *expr.Meta:
				if n.Key != expr.MetaKeyMARK || !n.SourceRegister || n.Register != e.Register || len(e.Data) != 4 {
					return bad(i)
				}
				p.mark, p.hasMark = binaryutil.NativeEndian.Uint32(e.Data), true
			case *expr.TProxy:
				if n.Family != f.proto || n.RegAddr != 0 || n.RegPort != e.Register || len(e.Data) != 2 {
					return bad(i)
				}
				p.tproxyPort = binary.BigEndian.Uint16(e.Data)
			default:
				return bad(i)
			}
			i++
		case *expr.Verdict:
			if (e.Kind != expr.VerdictAccept && e.Kind != expr.VerdictDrop) || i != len(exprs)-1 {
				return bad(i)
			}
			p.accept, p.drop = e.Kind == expr.VerdictAccept, e.Kind == expr.VerdictDrop
		default:
			return bad(i)
		}
	}
	return p, nil
}

// exprKey is what one of our expressions does, in the fields the steering
// table uses and the kernel reports back.
func exprKey(e expr.Any) string {
	switch e := e.(type) {
	case *expr.Meta:
		return fmt.Sprintf("meta key=%d sreg=%v reg=%d", e.Key, e.SourceRegister, e.Register)
	case *expr.Cmp:
		return fmt.Sprintf("cmp op=%d reg=%d data=%x", e.Op, e.Register, e.Data)
	case *expr.Payload:
		return fmt.Sprintf("payload op=%d dreg=%d base=%d off=%d len=%d", e.OperationType, e.DestRegister, e.Base, e.Offset, e.Len)
	case *expr.Bitwise:
		return fmt.Sprintf("bitwise sreg=%d dreg=%d len=%d mask=%x xor=%x", e.SourceRegister, e.DestRegister, e.Len, e.Mask, e.Xor)
	case *expr.Lookup:
		return fmt.Sprintf("lookup sreg=%d set=%s invert=%v dreg=%v", e.SourceRegister, e.SetName, e.Invert, e.IsDestRegSet)
	case *expr.Socket:
		return fmt.Sprintf("socket key=%d reg=%d", e.Key, e.Register)
	case *expr.Immediate:
		return fmt.Sprintf("immediate reg=%d data=%x", e.Register, e.Data)
	case *expr.TProxy:
		return fmt.Sprintf("tproxy family=%d addr=%d port=%d", e.Family, e.RegAddr, e.RegPort)
	case *expr.Fib:
		return fmt.Sprintf("fib %+v", *e)
	case *expr.Dup:
		return fmt.Sprintf("dup addr=%d dev=%d", e.RegAddr, e.RegDev)
	case *expr.Verdict:
		return fmt.Sprintf("verdict %d %s", e.Kind, e.Chain)
	}
	return fmt.Sprintf("%T", e)
}

// nftSet is a set of the steering table as read from the kernel.
type nftSet struct {
	keyType  string
	interval bool
	elements []nftables.SetElement
}

// decodeSteeringRules turns the dumped chain and its sets back into
// TproxyRules: the observed value of the nftables item. Every set must be
// looked up by exactly one rule, in the field and with the key type
// steeringRuleExprs gives it.
func decodeSteeringRules(rules []dumpedRule, sets map[string]nftSet, f nftFamily) (item.TproxyRules, error) {
	var t item.TproxyRules
	if len(rules) == 0 {
		return t, fmt.Errorf("chain %s is empty", steeringChain)
	}
	used := map[string]bool{}
	readSet := func(name, keyType string) (nftSet, error) {
		s, ok := sets[name]
		switch {
		case !ok:
			return s, fmt.Errorf("set %s is missing", name)
		case used[name]:
			return s, fmt.Errorf("set %s is looked up twice", name)
		case s.keyType != keyType || !s.interval:
			return s, fmt.Errorf("set %s is type %s (interval %v), want an interval set of %s", name, s.keyType, s.interval, keyType)
		}
		used[name] = true
		return s, nil
	}
	// readDivert reads the three sets of a divert or reply.
	readDivert := func(src, dst, port string) (item.Divert, error) {
		var d item.Divert
		ss, err1 := readSet(src, f.addrType.Name)
		ds, err2 := readSet(dst, f.addrType.Name)
		ps, err3 := readSet(port, nftables.TypeInetService.Name)
		if err := errors.Join(err1, err2, err3); err != nil {
			return d, err
		}
		var err error
		var from, to []netip.Prefix
		if from, err = setPrefixes(ss.elements, int(f.addrLen)); err == nil {
			if to, err = setPrefixes(ds.elements, int(f.addrLen)); err == nil {
				d.Ports, err = setPortRanges(ps.elements)
			}
		}
		d.Clients, d.Servers = from, to
		return d, err
	}
	haveIface := false
	var diverts []parsedRule // whose pass rules are still to come
	passed := 0
	socketRule := -1 // the index of the transparent-socket rule
	var steered *nftSet
	for i, r := range rules {
		if !bytes.Equal(r.userData, ruleTag) {
			return t, fmt.Errorf("rule %d was not written by sosappliance", i+1)
		}
		if len(r.unknown) > 0 {
			return t, fmt.Errorf("rule %d has expressions sosappliance does not write: %s", i+1, strings.Join(r.unknown, ", "))
		}
		if socketRule < 0 && len(r.exprs) == 3 {
			// The rules before it let unsteered traffic out: their
			// shape is checked with the rest below.
			if lk, ok := r.exprs[1].(*expr.Lookup); ok && lk.SetName == setSteered && steered == nil {
				s, err := readSet(setSteered, f.addrType.Name)
				if err != nil {
					return t, fmt.Errorf("rule %d: %w", i+1, err)
				}
				steered = &s
				continue
			}
			if m, ok := r.exprs[0].(*expr.Meta); ok && m.Key == expr.MetaKeyIIFNAME && i == 0 {
				continue
			}
		}
		p, err := parseSteeringRule(r.exprs, f)
		if err != nil {
			return t, fmt.Errorf("rule %d: %w", i+1, err)
		}
		if socketRule < 0 {
			if !p.tcp || !p.accept || !p.hasMark || !p.transparent || p.iifname != "" || p.saddrSet != "" || p.daddrSet != "" ||
				p.dportSet != "" || p.sportSet != "" || p.tproxyPort != 0 || p.opening || p.notLocal || p.ttl || p.dup {
				return t, fmt.Errorf("rule %d is not the transparent-socket rule", i+1)
			}
			t.Mark, socketRule = p.mark, i
			continue
		}
		if !haveIface {
			t.Interface, haveIface = p.iifname, true
		}
		if p.iifname != t.Interface {
			return t, fmt.Errorf("rule %d differs from rule 2 in interface", i+1)
		}
		isDivert := p.tcp && p.accept && p.hasMark && p.opening && !p.transparent && p.saddrSet != "" && p.daddrSet != "" &&
			p.dportSet != "" && p.tproxyPort != 0 && !p.notLocal && !p.ttl && !p.dup
		isPass := p.tcp && p.drop && !p.hasMark && !p.opening && !p.transparent && p.saddrSet != "" && p.daddrSet != "" &&
			(p.dportSet != "") != (p.sportSet != "") && p.tproxyPort == 0 && p.notLocal && p.ttl && p.dup
		switch {
		case isDivert:
			if passed > 0 || len(t.Replies) > 0 {
				return t, fmt.Errorf("rule %d is a divert rule after a pass rule", i+1)
			}
			if p.mark != t.Mark {
				return t, fmt.Errorf("rule %d sets mark %#x, rule 1 sets %#x", i+1, p.mark, t.Mark)
			}
			if len(diverts) == 0 {
				t.ListenPort = p.tproxyPort
			}
			if p.tproxyPort != t.ListenPort {
				return t, fmt.Errorf("rule %d differs from rule 2 in listen port", i+1)
			}
			d, err := readDivert(p.saddrSet, p.daddrSet, p.dportSet)
			if err != nil {
				return t, fmt.Errorf("rule %d: %w", i+1, err)
			}
			diverts = append(diverts, p)
			t.Divert = append(t.Divert, d)
		case isPass && p.dportSet != "":
			// A divert's pass rule, in the order of the diverts, on
			// the divert's own sets.
			if passed >= len(diverts) || len(t.Replies) > 0 {
				return t, fmt.Errorf("rule %d is a pass rule with no divert of its own", i+1)
			}
			d := diverts[passed]
			if p.saddrSet != d.saddrSet || p.daddrSet != d.daddrSet || p.dportSet != d.dportSet {
				return t, fmt.Errorf("rule %d looks up sets %s, %s, %s; its divert, rule %d, looks up %s, %s, %s", i+1,
					p.saddrSet, p.daddrSet, p.dportSet, passed+2, d.saddrSet, d.daddrSet, d.dportSet)
			}
			passed++
		case isPass:
			if passed != len(diverts) {
				return t, fmt.Errorf("rule %d is a reply's pass rule before every divert has its own", i+1)
			}
			d, err := readDivert(p.saddrSet, p.daddrSet, p.sportSet)
			if err != nil {
				return t, fmt.Errorf("rule %d: %w", i+1, err)
			}
			// A reply's sources are its servers.
			d.Clients, d.Servers = d.Servers, d.Clients
			t.Replies = append(t.Replies, d)
		default:
			return t, fmt.Errorf("rule %d is neither a divert rule nor a pass rule", i+1)
		}
	}
	if passed != len(diverts) {
		return t, fmt.Errorf("%d of %d divert rules have no pass rule", len(diverts)-passed, len(diverts))
	}
	// What was read must be what steeringRuleExprs writes for it,
	// expression by expression: the same expressions in another order,
	// or with another comparison, do something else; and the steered
	// sources must be the diverts' clients and the replies' servers.
	wantSets, want := steeringRuleExprs(t, f)
	for _, ws := range wantSets {
		if ws.name != setSteered {
			continue
		}
		if steered == nil {
			return t, fmt.Errorf("set %s is missing", setSteered)
		}
		got, err1 := setIntervals(steered.elements, int(f.addrLen))
		exp, err2 := setIntervals(ws.elements, int(f.addrLen))
		if err := errors.Join(err1, err2); err != nil || fmt.Sprint(got) != fmt.Sprint(exp) {
			return t, fmt.Errorf("set %s is not the diverts' clients and the replies' servers (%v)", setSteered, err)
		}
	}
	if len(want) != len(rules) {
		return t, fmt.Errorf("%d rules, %d written for what they say", len(rules), len(want))
	}
	for i, r := range rules {
		if len(r.exprs) != len(want[i]) {
			return t, fmt.Errorf("rule %d has %d expressions, %d written for what it says", i+1, len(r.exprs), len(want[i]))
		}
		for j, e := range r.exprs {
			if got, w := exprKey(e), exprKey(want[i][j]); got != w {
				return t, fmt.Errorf("rule %d expression %d is %s, %s written for what the rule says", i+1, j+1, got, w)
			}
		}
	}
	for name := range sets {
		if !used[name] {
			return t, fmt.Errorf("set %s is not used by any rule", name)
		}
	}
	return t, nil
}
