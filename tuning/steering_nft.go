package tuning

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/sosappliance/sosappliance/host/item"
)

// steeringChain is the one chain of the steering table.
const steeringChain = "prerouting"

// ruleTag is the user data of every rule the appliance writes; a rule
// without it was not made by us and makes the table unrecognised.
var ruleTag = []byte("sosappliance")

// reg is the register all our expressions use.
const reg = 1

func steeringTable() *nftables.Table {
	return &nftables.Table{Name: SteeringTable, Family: nftables.TableFamilyIPv4}
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

// steeringRuleExprs builds the chain, in order:
//
//	meta l4proto tcp socket transparent 1 meta mark set MARK accept
//	[iifname IF] meta l4proto tcp ip saddr CLIENT ip daddr SERVER tcp dport PORT
//	    meta mark set MARK tproxy ip to :LISTEN accept          (per client prefix)
//
// The first rule catches packets of connections the relay already owns
// (accepted from TPROXY, or opened with IP_TRANSPARENT toward a server); the
// others divert new whitelisted connections to the relay's listener.
func steeringRuleExprs(t item.TproxyRules) [][]expr.Any {
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
	rules := [][]expr.Any{append(socket, &expr.Verdict{Kind: expr.VerdictAccept})}
	for _, d := range t.Divert {
		for _, client := range d.Clients {
			var r []expr.Any
			if t.Interface != "" {
				r = append(r,
					&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: reg},
					&expr.Cmp{Op: expr.CmpOpEq, Register: reg, Data: ifnameData(t.Interface)})
			}
			r = append(r, tcp()...)
			r = append(r, &expr.Payload{DestRegister: reg, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4})
			if client.Bits() < 32 {
				mask := binaryutil.BigEndian.PutUint32(^uint32(0) << (32 - client.Bits()))
				r = append(r, &expr.Bitwise{SourceRegister: reg, DestRegister: reg, Len: 4, Mask: mask, Xor: []byte{0, 0, 0, 0}})
			}
			addr := client.Addr().As4()
			server := d.Server.As4()
			r = append(r,
				&expr.Cmp{Op: expr.CmpOpEq, Register: reg, Data: addr[:]},
				&expr.Payload{DestRegister: reg, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
				&expr.Cmp{Op: expr.CmpOpEq, Register: reg, Data: server[:]},
				&expr.Payload{DestRegister: reg, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
				&expr.Cmp{Op: expr.CmpOpEq, Register: reg, Data: binaryutil.BigEndian.PutUint16(d.Port)},
			)
			r = append(r, setMark()...)
			r = append(r,
				&expr.Immediate{Register: reg, Data: binaryutil.BigEndian.PutUint16(t.ListenPort)},
				&expr.TProxy{Family: unix.NFPROTO_IPV4, TableFamily: unix.NFPROTO_IPV4, RegPort: reg},
				&expr.Verdict{Kind: expr.VerdictAccept},
			)
			rules = append(rules, r)
		}
	}
	return rules
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

// dumpRules reads the rules of one chain of an ip table.
func dumpRules(table, chain string) ([]dumpedRule, error) {
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
		Data: append([]byte{unix.NFPROTO_IPV4, unix.NFNETLINK_V0, 0, 0}, attrs...),
	})
	if err != nil {
		return nil, fmt.Errorf("nftables: list rules of %s %s: %w", table, chain, err)
	}
	var rules []dumpedRule
	for _, m := range msgs {
		if len(m.Data) < 4 {
			continue
		}
		r, err := decodeRuleMsg(m.Data[4:])
		if err != nil {
			return nil, fmt.Errorf("nftables: decode rule of %s %s: %w", table, chain, err)
		}
		rules = append(rules, r)
	}
	return rules, nil
}

func decodeRuleMsg(b []byte) (dumpedRule, error) {
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
						return decodeExpr(one, &r)
					})
				}
				return nil
			})
		}
	}
	return r, ad.Err()
}

func decodeExpr(ad *netlink.AttributeDecoder, r *dumpedRule) error {
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
	if err := expr.Unmarshal(unix.NFPROTO_IPV4, data, e); err != nil {
		return fmt.Errorf("%s expression: %w", name, err)
	}
	// A verdict is an immediate into the verdict register.
	if imm, ok := e.(*expr.Immediate); ok && imm.Register == unix.NFT_REG_VERDICT && len(imm.Data) == 0 {
		v := &expr.Verdict{}
		if err := expr.Unmarshal(unix.NFPROTO_IPV4, data, v); err != nil {
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
	saddr       netip.Prefix
	daddr       netip.Addr
	dport       uint16
	mark        uint32
	hasMark     bool
	tproxyPort  uint16
	accept      bool
}

// parseSteeringRule recognises the two rule shapes steeringRuleExprs makes;
// anything else is an error saying what was not understood.
func parseSteeringRule(exprs []expr.Any) (parsedRule, error) {
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
			if e.Key != expr.SocketKeyTransparent || !ok || cmp.Register != e.Register || !bytes.Equal(cmp.Data, []byte{1}) {
				return bad(i)
			}
			p.transparent = true
			i++
		case *expr.Payload:
			if e.OperationType != expr.PayloadLoad {
				return bad(i)
			}
			var mask []byte
			j := i + 1
			if bw, ok := next().(*expr.Bitwise); ok {
				if bw.SourceRegister != e.DestRegister || bw.Len != 4 || len(bw.Mask) != 4 || !bytes.Equal(bw.Xor, []byte{0, 0, 0, 0}) {
					return bad(i + 1)
				}
				mask = bw.Mask
				j++
			}
			if j >= len(exprs) {
				return bad(i)
			}
			cmp, ok := exprs[j].(*expr.Cmp)
			if !ok || cmp.Op != expr.CmpOpEq || cmp.Register != e.DestRegister || uint32(len(cmp.Data)) != e.Len {
				return bad(i)
			}
			switch {
			case e.Base == expr.PayloadBaseNetworkHeader && e.Offset == 12 && e.Len == 4:
				bits := 32
				if mask != nil {
					if bits = maskBits(mask); bits < 0 {
						return bad(i + 1)
					}
				}
				p.saddr = netip.PrefixFrom(netip.AddrFrom4([4]byte(cmp.Data)), bits)
			case mask == nil && e.Base == expr.PayloadBaseNetworkHeader && e.Offset == 16 && e.Len == 4:
				p.daddr = netip.AddrFrom4([4]byte(cmp.Data))
			case mask == nil && e.Base == expr.PayloadBaseTransportHeader && e.Offset == 2 && e.Len == 2:
				p.dport = binary.BigEndian.Uint16(cmp.Data)
			default:
				return bad(i)
			}
			i = j
		case *expr.Immediate:
			switch n := next().(type) {
			case *expr.Meta:
				if n.Key != expr.MetaKeyMARK || !n.SourceRegister || n.Register != e.Register || len(e.Data) != 4 {
					return bad(i)
				}
				p.mark, p.hasMark = binaryutil.NativeEndian.Uint32(e.Data), true
			case *expr.TProxy:
				if n.Family != unix.NFPROTO_IPV4 || n.RegAddr != 0 || n.RegPort != e.Register || len(e.Data) != 2 {
					return bad(i)
				}
				p.tproxyPort = binary.BigEndian.Uint16(e.Data)
			default:
				return bad(i)
			}
			i++
		case *expr.Verdict:
			if e.Kind != expr.VerdictAccept || i != len(exprs)-1 {
				return bad(i)
			}
			p.accept = true
		default:
			return bad(i)
		}
	}
	return p, nil
}

// maskBits is the prefix length of a contiguous IPv4 mask, or -1.
func maskBits(mask []byte) int {
	m := binary.BigEndian.Uint32(mask)
	bits := 0
	for bits < 32 && m&(1<<(31-bits)) != 0 {
		bits++
	}
	if m<<bits != 0 {
		return -1
	}
	return bits
}

// decodeSteeringRules turns the dumped chain back into TproxyRules: the
// observed value of the nftables item.
func decodeSteeringRules(rules []dumpedRule) (item.TproxyRules, error) {
	var t item.TproxyRules
	if len(rules) == 0 {
		return t, fmt.Errorf("chain %s is empty", steeringChain)
	}
	haveIface := false
	for i, r := range rules {
		if !bytes.Equal(r.userData, ruleTag) {
			return t, fmt.Errorf("rule %d was not written by sosappliance", i+1)
		}
		if len(r.unknown) > 0 {
			return t, fmt.Errorf("rule %d has expressions sosappliance does not write: %s", i+1, strings.Join(r.unknown, ", "))
		}
		p, err := parseSteeringRule(r.exprs)
		if err != nil {
			return t, fmt.Errorf("rule %d: %w", i+1, err)
		}
		if !p.tcp || !p.accept || !p.hasMark {
			return t, fmt.Errorf("rule %d is incomplete", i+1)
		}
		if i == 0 {
			if !p.transparent || p.iifname != "" || p.saddr.IsValid() || p.daddr.IsValid() || p.dport != 0 || p.tproxyPort != 0 {
				return t, fmt.Errorf("rule 1 is not the transparent-socket rule")
			}
			t.Mark = p.mark
			continue
		}
		if p.transparent || !p.saddr.IsValid() || !p.daddr.IsValid() || p.dport == 0 || p.tproxyPort == 0 {
			return t, fmt.Errorf("rule %d is not a divert rule", i+1)
		}
		if p.mark != t.Mark {
			return t, fmt.Errorf("rule %d sets mark %#x, rule 1 sets %#x", i+1, p.mark, t.Mark)
		}
		if i == 1 {
			t.ListenPort, t.Interface, haveIface = p.tproxyPort, p.iifname, true
		}
		if haveIface && (p.tproxyPort != t.ListenPort || p.iifname != t.Interface) {
			return t, fmt.Errorf("rule %d differs from rule 2 in listen port or interface", i+1)
		}
		t.Divert = append(t.Divert, item.Divert{Clients: []netip.Prefix{p.saddr}, Server: p.daddr, Port: p.dport})
	}
	return t, nil
}
