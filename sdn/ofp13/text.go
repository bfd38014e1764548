package ofp13

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/bits"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// The String methods here print matches, actions and instructions the way
// ovs-ofctl does, so that operators read the same text from `sosappliance
// plan` as from `ovs-ofctl dump-flows`.

var portNames = map[uint32]string{
	PortInPort: "IN_PORT", PortTable: "TABLE", PortNormal: "NORMAL", PortFlood: "FLOOD", PortAll: "ALL",
	PortController: "CONTROLLER", PortLocal: "LOCAL", PortAny: "ANY",
}

// PortString names reserved ports and prints others as numbers.
func PortString(p uint32) string {
	if s, ok := portNames[p]; ok {
		return s
	}
	return strconv.FormatUint(uint64(p), 10)
}

func (a *ActionOutput) String() string {
	switch a.Port {
	case PortController:
		return fmt.Sprintf("CONTROLLER:%d", a.MaxLen)
	case PortInPort, PortTable, PortNormal, PortFlood, PortAll, PortLocal:
		return portNames[a.Port]
	}
	return "output:" + PortString(a.Port)
}

func (a *ActionGroup) String() string    { return fmt.Sprintf("group:%d", a.GroupID) }
func (a *ActionPushVLAN) String() string { return fmt.Sprintf("push_vlan:0x%04x", a.EtherType) }
func (a *ActionPopVLAN) String() string  { return "pop_vlan" }

func (a *ActionSetField) String() string {
	f := a.Field
	name := f.name()
	if f.Class == OXMClassOpenFlowBasic && int(f.Field) < len(setFieldNames) {
		name = setFieldNames[f.Field]
	}
	v := formatValue(f, f.Value)
	if f.Mask != nil {
		v += "/" + formatValue(f, f.Mask)
	}
	return "set_field:" + v + "->" + name
}

func (a *ActionRaw) String() string {
	return fmt.Sprintf("action(type=%d,body=%s)", a.Type, hex.EncodeToString(a.Body))
}

// ActionsString prints an action list as ovs-ofctl does; an empty list is
// "drop".
func ActionsString(actions []Action) string {
	if len(actions) == 0 {
		return "drop"
	}
	parts := make([]string, len(actions))
	for i, a := range actions {
		parts[i] = a.String()
	}
	return strings.Join(parts, ",")
}

func (i *GotoTable) String() string { return fmt.Sprintf("goto_table:%d", i.TableID) }
func (i *ApplyActions) String() string {
	if len(i.Actions) == 0 {
		return "apply_actions()"
	}
	return ActionsString(i.Actions)
}
func (i *WriteActions) String() string { return "write_actions(" + ActionsString(i.Actions) + ")" }
func (i *ClearActions) String() string { return "clear_actions" }
func (i *InstructionRaw) String() string {
	return fmt.Sprintf("instruction(type=%d,body=%s)", i.Type, hex.EncodeToString(i.Body))
}

// InstructionsString prints the instructions of a flow as the value of
// ovs-ofctl's "actions=": apply-actions inline, the others by name, and
// "drop" when there is nothing to do.
func InstructionsString(instructions []Instruction) string {
	var parts []string
	for _, in := range instructions {
		if a, ok := in.(*ApplyActions); ok && len(a.Actions) == 0 {
			continue
		}
		parts = append(parts, in.String())
	}
	if len(parts) == 0 {
		return "drop"
	}
	return strings.Join(parts, ",")
}

// printOrder is the order in which ovs-ofctl prints match fields.
var printOrder = []OXMField{FieldInPort, FieldInPhyPort, FieldMetadata, FieldVLANVID, FieldVLANPCP, FieldEthSrc,
	FieldEthDst, FieldEthType, FieldIPv4Src, FieldIPv4Dst, FieldIPv6Src, FieldIPv6Dst, FieldARPSPA, FieldARPTPA, FieldIPProto, FieldARPOp,
	FieldIPDSCP, FieldIPECN, FieldARPSHA, FieldARPTHA, FieldTCPSrc, FieldTCPDst, FieldUDPSrc, FieldUDPDst,
	FieldSCTPSrc, FieldSCTPDst, FieldICMPv4Type, FieldICMPv4Code}

var l4Names = map[OXMField]string{FieldTCPSrc: "tp_src", FieldTCPDst: "tp_dst", FieldUDPSrc: "tp_src",
	FieldUDPDst: "tp_dst", FieldSCTPSrc: "tp_src", FieldSCTPDst: "tp_dst"}

// String prints the match as ovs-ofctl does, e.g.
// "tcp,nw_src=10.0.0.0/24,nw_dst=10.0.1.1,tp_dst=5201"; an empty match
// prints as "".
func (m Match) String() string {
	var parts []string
	consumed := map[OXMField]bool{}
	exact := func(f OXMField) (uint64, bool) {
		o, ok := m.Get(f)
		if !ok || o.Mask != nil || len(o.Value) > 8 {
			return 0, false
		}
		var v uint64
		for _, c := range o.Value {
			v = v<<8 | uint64(c)
		}
		return v, true
	}
	ethType, hasEthType := exact(FieldEthType)
	proto, hasProto := exact(FieldIPProto)
	switch {
	case hasEthType && ethType == 0x0800 && hasProto && (proto == 1 || proto == 6 || proto == 17 || proto == 132):
		parts = append(parts, map[uint64]string{1: "icmp", 6: "tcp", 17: "udp", 132: "sctp"}[proto])
		consumed[FieldEthType], consumed[FieldIPProto] = true, true
	case hasEthType && ethType == 0x0800:
		parts = append(parts, "ip")
		consumed[FieldEthType] = true
	case hasEthType && ethType == 0x86dd && hasProto && (proto == 6 || proto == 17 || proto == 132):
		parts = append(parts, map[uint64]string{6: "tcp6", 17: "udp6", 132: "sctp6"}[proto])
		consumed[FieldEthType], consumed[FieldIPProto] = true, true
	case hasEthType && ethType == 0x86dd:
		parts = append(parts, "ipv6")
		consumed[FieldEthType] = true
	case hasEthType && ethType == 0x0806:
		parts = append(parts, "arp")
		consumed[FieldEthType] = true
	}
	printed := map[int]bool{}
	for _, f := range printOrder {
		if consumed[f] {
			continue
		}
		for i, o := range m.Fields {
			if o.IsBasic(f) && !printed[i] {
				printed[i] = true
				parts = append(parts, formatField(o))
			}
		}
	}
	for i, o := range m.Fields {
		if !printed[i] && !(o.Class == OXMClassOpenFlowBasic && consumed[o.Field]) {
			parts = append(parts, formatField(o))
		}
	}
	return strings.Join(parts, ",")
}

func formatField(o OXM) string {
	name := o.name()
	if n, ok := l4Names[o.Field]; ok && o.Class == OXMClassOpenFlowBasic {
		name = n
	}
	if o.IsBasic(FieldVLANVID) && len(o.Value) == 2 {
		v := binary.BigEndian.Uint16(o.Value)
		switch {
		case o.Mask == nil && v&VLANPresent != 0:
			return fmt.Sprintf("dl_vlan=%d", v&0xfff)
		case o.Mask == nil:
			return fmt.Sprintf("vlan_tci=0x%04x", v)
		}
		return fmt.Sprintf("vlan_tci=0x%04x/0x%04x", v, binary.BigEndian.Uint16(o.Mask))
	}
	if o.Class != OXMClassOpenFlowBasic || int(o.Field) >= len(fieldSizes) {
		s := name + "=" + hex.EncodeToString(o.Value)
		if o.Mask != nil {
			s += "/" + hex.EncodeToString(o.Mask)
		}
		return s
	}
	if o.Mask != nil && isIPv4Field(o.Field) {
		if ones, ok := prefixLen(o.Mask); ok {
			return fmt.Sprintf("%s=%s/%d", name, formatValue(o, o.Value), ones)
		}
	}
	if o.Mask != nil && (o.Field == FieldIPv6Src || o.Field == FieldIPv6Dst) && len(o.Mask) == 16 {
		if ones, ok := prefixLen6(o.Mask); ok {
			return fmt.Sprintf("%s=%s/%d", name, formatValue(o, o.Value), ones)
		}
	}
	s := name + "=" + formatValue(o, o.Value)
	if o.Mask != nil {
		s += "/" + formatValue(o, o.Mask)
	}
	return s
}

func isIPv4Field(f OXMField) bool {
	return f == FieldIPv4Src || f == FieldIPv4Dst || f == FieldARPSPA || f == FieldARPTPA
}

func prefixLen(mask []byte) (int, bool) {
	if len(mask) != 4 {
		return 0, false
	}
	m := binary.BigEndian.Uint32(mask)
	ones := bits.LeadingZeros32(^m)
	return ones, m == ^uint32(0)<<(32-ones) || ones == 32
}

func prefixLen6(mask []byte) (int, bool) {
	ones := 0
	for ones < 128 && mask[ones/8]&(0x80>>(ones%8)) != 0 {
		ones++
	}
	for i := ones; i < 128; i++ {
		if mask[i/8]&(0x80>>(i%8)) != 0 {
			return 0, false
		}
	}
	return ones, true
}

func formatValue(o OXM, v []byte) string {
	if o.Class == OXMClassOpenFlowBasic {
		switch o.Field {
		case FieldEthSrc, FieldEthDst, FieldARPSHA, FieldARPTHA:
			if len(v) == 6 {
				return net.HardwareAddr(v).String()
			}
		case FieldIPv4Src, FieldIPv4Dst, FieldARPSPA, FieldARPTPA:
			if len(v) == 4 {
				return netip.AddrFrom4([4]byte(v)).String()
			}
		case FieldIPv6Src, FieldIPv6Dst:
			if len(v) == 16 {
				return netip.AddrFrom16([16]byte(v)).String()
			}
		case FieldEthType:
			if len(v) == 2 {
				return fmt.Sprintf("0x%04x", binary.BigEndian.Uint16(v))
			}
		case FieldInPort:
			if len(v) == 4 {
				return PortString(binary.BigEndian.Uint32(v))
			}
		}
	}
	if len(v) <= 8 && len(v) > 0 {
		var n uint64
		for _, c := range v {
			n = n<<8 | uint64(c)
		}
		if o.Mask != nil && o.Class == OXMClassOpenFlowBasic {
			return fmt.Sprintf("0x%x", n)
		}
		return strconv.FormatUint(n, 10)
	}
	return "0x" + hex.EncodeToString(v)
}
