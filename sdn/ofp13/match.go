package ofp13

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"slices"
)

// OXM classes.
const (
	OXMClassOpenFlowBasic uint16 = 0x8000
	OXMClassExperimenter  uint16 = 0xffff
)

// OXMField is a field of the OpenFlow basic class.
type OXMField uint8

// OpenFlow basic match fields this package knows by size and name.
const (
	FieldInPort     OXMField = 0
	FieldInPhyPort  OXMField = 1
	FieldMetadata   OXMField = 2
	FieldEthDst     OXMField = 3
	FieldEthSrc     OXMField = 4
	FieldEthType    OXMField = 5
	FieldVLANVID    OXMField = 6
	FieldVLANPCP    OXMField = 7
	FieldIPDSCP     OXMField = 8
	FieldIPECN      OXMField = 9
	FieldIPProto    OXMField = 10
	FieldIPv4Src    OXMField = 11
	FieldIPv4Dst    OXMField = 12
	FieldTCPSrc     OXMField = 13
	FieldTCPDst     OXMField = 14
	FieldUDPSrc     OXMField = 15
	FieldUDPDst     OXMField = 16
	FieldSCTPSrc    OXMField = 17
	FieldSCTPDst    OXMField = 18
	FieldICMPv4Type OXMField = 19
	FieldICMPv4Code OXMField = 20
	FieldARPOp      OXMField = 21
	FieldARPSPA     OXMField = 22
	FieldARPTPA     OXMField = 23
	FieldARPSHA     OXMField = 24
	FieldARPTHA     OXMField = 25
	FieldIPv6Src    OXMField = 26
	FieldIPv6Dst    OXMField = 27
)

// fieldSizes are the value sizes of the basic fields above; a basic field
// of another size is malformed.
var fieldSizes = [...]int{4, 4, 8, 6, 6, 2, 2, 1, 1, 1, 1, 4, 4, 2, 2, 2, 2, 2, 2, 1, 1, 2, 4, 4, 6, 6, 16, 16}

// fieldNames are the names ovs-ofctl prints for the basic fields.
var fieldNames = [...]string{"in_port", "in_phy_port", "metadata", "dl_dst", "dl_src", "dl_type", "vlan_vid",
	"dl_vlan_pcp", "ip_dscp", "nw_ecn", "nw_proto", "nw_src", "nw_dst", "tp_src", "tp_dst", "udp_src", "udp_dst",
	"sctp_src", "sctp_dst", "icmp_type", "icmp_code", "arp_op", "arp_spa", "arp_tpa", "arp_sha", "arp_tha",
	"ipv6_src", "ipv6_dst"}

// setFieldNames are the names ovs-ofctl prints after "->" in set_field.
var setFieldNames = [...]string{"in_port", "in_phy_port", "metadata", "eth_dst", "eth_src", "eth_type", "vlan_vid",
	"vlan_pcp", "ip_dscp", "nw_ecn", "nw_proto", "ip_src", "ip_dst", "tcp_src", "tcp_dst", "udp_src", "udp_dst",
	"sctp_src", "sctp_dst", "icmp_type", "icmp_code", "arp_op", "arp_spa", "arp_tpa", "arp_sha", "arp_tha",
	"ipv6_src", "ipv6_dst"}

// VLANPresent is the OFPVID_PRESENT bit of a vlan_vid value: set when the
// packet has a VLAN tag.
const VLANPresent uint16 = 0x1000

// OXM is one match field (or, inside a set-field action, a value to set).
type OXM struct {
	Class uint16
	Field OXMField
	// Experimenter is the experimenter id of the experimenter class.
	Experimenter uint32
	Value        []byte
	// Mask is nil for an exact match and as long as Value otherwise.
	Mask []byte
}

func basic(f OXMField, value, mask []byte) OXM {
	return OXM{Class: OXMClassOpenFlowBasic, Field: f, Value: value, Mask: mask}
}

func u16b(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }
func u32b(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

// InPort matches the ingress port.
func InPort(port uint32) OXM { return basic(FieldInPort, u32b(port), nil) }

// EthDst matches the destination MAC.
func EthDst(mac net.HardwareAddr) OXM { return basic(FieldEthDst, slices.Clone(mac), nil) }

// EthDstMasked matches the destination MAC under mask.
func EthDstMasked(mac, mask net.HardwareAddr) OXM {
	return basic(FieldEthDst, slices.Clone(mac), slices.Clone(mask))
}

// EthSrc matches the source MAC.
func EthSrc(mac net.HardwareAddr) OXM { return basic(FieldEthSrc, slices.Clone(mac), nil) }

// EthSrcMasked matches the source MAC under mask.
func EthSrcMasked(mac, mask net.HardwareAddr) OXM {
	return basic(FieldEthSrc, slices.Clone(mac), slices.Clone(mask))
}

// EthType matches the Ethernet type.
func EthType(t uint16) OXM { return basic(FieldEthType, u16b(t), nil) }

// VLANVID matches the VLAN id field; pass vid|VLANPresent to match tagged
// packets with that id, 0 to match untagged ones.
func VLANVID(vid uint16) OXM { return basic(FieldVLANVID, u16b(vid), nil) }

// VLANVIDMasked matches the VLAN id field under mask.
func VLANVIDMasked(vid, mask uint16) OXM { return basic(FieldVLANVID, u16b(vid), u16b(mask)) }

// IPProto matches the IP protocol.
func IPProto(p uint8) OXM { return basic(FieldIPProto, []byte{p}, nil) }

func prefixOXM(f OXMField, p netip.Prefix) OXM {
	a := p.Addr().Unmap().As4()
	if p.Bits() >= 32 || p.Bits() < 0 {
		return basic(f, a[:], nil)
	}
	mask := binary.BigEndian.AppendUint32(nil, ^uint32(0)<<(32-p.Bits()))
	v := binary.BigEndian.AppendUint32(nil, binary.BigEndian.Uint32(a[:])&binary.BigEndian.Uint32(mask))
	return basic(f, v, mask)
}

func prefix6OXM(f OXMField, p netip.Prefix) OXM {
	a := p.Addr().As16()
	if p.Bits() >= 128 || p.Bits() < 0 {
		return basic(f, a[:], nil)
	}
	mask := make([]byte, 16)
	for i := range p.Bits() {
		mask[i/8] |= 0x80 >> (i % 8)
	}
	for i := range a {
		a[i] &= mask[i]
	}
	return basic(f, a[:], mask)
}

// IPv6Src matches the IPv6 source in prefix p; a /128 is an exact match.
func IPv6Src(p netip.Prefix) OXM { return prefix6OXM(FieldIPv6Src, p) }

// IPv6Dst matches the IPv6 destination in prefix p.
func IPv6Dst(p netip.Prefix) OXM { return prefix6OXM(FieldIPv6Dst, p) }

// IPv4Src matches the IPv4 source in prefix p; a /32 is an exact match.
func IPv4Src(p netip.Prefix) OXM { return prefixOXM(FieldIPv4Src, p) }

// IPv4Dst matches the IPv4 destination in prefix p.
func IPv4Dst(p netip.Prefix) OXM { return prefixOXM(FieldIPv4Dst, p) }

// TCPSrc matches the TCP source port.
func TCPSrc(port uint16) OXM { return basic(FieldTCPSrc, u16b(port), nil) }

// TCPDst matches the TCP destination port.
func TCPDst(port uint16) OXM { return basic(FieldTCPDst, u16b(port), nil) }

// TCPSrcMasked matches the TCP source ports p with p&mask == value, as
// Open vSwitch does for port ranges split into aligned blocks.
func TCPSrcMasked(value, mask uint16) OXM { return basic(FieldTCPSrc, u16b(value&mask), u16b(mask)) }

// TCPDstMasked matches the TCP destination ports p with p&mask == value.
func TCPDstMasked(value, mask uint16) OXM { return basic(FieldTCPDst, u16b(value&mask), u16b(mask)) }

// UDPSrc matches the UDP source port.
func UDPSrc(port uint16) OXM { return basic(FieldUDPSrc, u16b(port), nil) }

// UDPDst matches the UDP destination port.
func UDPDst(port uint16) OXM { return basic(FieldUDPDst, u16b(port), nil) }

// ARPOp matches the ARP opcode.
func ARPOp(op uint16) OXM { return basic(FieldARPOp, u16b(op), nil) }

// ARPSPA matches the ARP sender protocol address in prefix p.
func ARPSPA(p netip.Prefix) OXM { return prefixOXM(FieldARPSPA, p) }

// ARPTPA matches the ARP target protocol address in prefix p.
func ARPTPA(p netip.Prefix) OXM { return prefixOXM(FieldARPTPA, p) }

// ARPSHA matches the ARP sender hardware address.
func ARPSHA(mac net.HardwareAddr) OXM { return basic(FieldARPSHA, slices.Clone(mac), nil) }

// ARPTHA matches the ARP target hardware address.
func ARPTHA(mac net.HardwareAddr) OXM { return basic(FieldARPTHA, slices.Clone(mac), nil) }

// IsBasic reports whether the OXM is the given OpenFlow basic field.
func (o OXM) IsBasic(f OXMField) bool { return o.Class == OXMClassOpenFlowBasic && o.Field == f }

func (o OXM) payloadLen() int {
	n := len(o.Value) + len(o.Mask)
	if o.Class == OXMClassExperimenter {
		n += 4
	}
	return n
}

// encodedLen is the OXM's size on the wire, header included.
func (o OXM) encodedLen() int { return 4 + o.payloadLen() }

func (o OXM) check() error {
	if o.Field > 0x7f {
		return encodeErrorf("OXM field %d does not fit 7 bits", o.Field)
	}
	if o.Mask != nil && len(o.Mask) != len(o.Value) {
		return encodeErrorf("OXM %s: mask of %d bytes for a value of %d", o.name(), len(o.Mask), len(o.Value))
	}
	if o.Class == OXMClassOpenFlowBasic && int(o.Field) < len(fieldSizes) && len(o.Value) != fieldSizes[o.Field] {
		return encodeErrorf("OXM %s: value of %d bytes, want %d", o.name(), len(o.Value), fieldSizes[o.Field])
	}
	if o.payloadLen() > 0xff {
		return encodeErrorf("OXM %s: payload of %d bytes", o.name(), o.payloadLen())
	}
	return nil
}

func (o OXM) appendTo(b []byte) ([]byte, error) {
	if err := o.check(); err != nil {
		return b, err
	}
	hasMask := byte(0)
	if o.Mask != nil {
		hasMask = 1
	}
	b = appendU16(b, o.Class)
	b = append(b, byte(o.Field)<<1|hasMask, byte(o.payloadLen()))
	if o.Class == OXMClassExperimenter {
		b = appendU32(b, o.Experimenter)
	}
	b = append(b, o.Value...)
	return append(b, o.Mask...), nil
}

func decodeOXM(d *decoder) OXM {
	class := d.u16()
	fh := d.u8()
	n := int(d.u8())
	o := OXM{Class: class, Field: OXMField(fh >> 1)}
	payload := d.sub(n, "oxm "+o.name())
	defer d.adopt(payload)
	if class == OXMClassExperimenter {
		o.Experimenter = payload.u32()
	}
	vlen := payload.remaining()
	if fh&1 != 0 {
		if vlen%2 != 0 {
			payload.fail(ErrBadOXM, "masked field with an odd payload of %d bytes", vlen)
			return o
		}
		vlen /= 2
	}
	if class == OXMClassOpenFlowBasic && int(o.Field) < len(fieldSizes) && vlen != fieldSizes[o.Field] {
		payload.fail(ErrBadOXM, "value of %d bytes, want %d", vlen, fieldSizes[o.Field])
		return o
	}
	o.Value = payload.bytes(vlen)
	if fh&1 != 0 {
		o.Mask = payload.bytes(vlen)
	}
	return o
}

func (o OXM) name() string {
	if o.Class == OXMClassOpenFlowBasic && int(o.Field) < len(fieldNames) {
		return fieldNames[o.Field]
	}
	if o.Class == OXMClassExperimenter {
		return fmt.Sprintf("oxm(exp 0x%x field %d)", o.Experimenter, o.Field)
	}
	return fmt.Sprintf("oxm(class 0x%04x field %d)", o.Class, o.Field)
}

// Match types.
const MatchTypeOXM uint16 = 1

// Match is an OXM match: the fields a packet must have, in wire order.
type Match struct {
	Fields []OXM
}

// NewMatch builds a match from fields.
func NewMatch(fields ...OXM) Match { return Match{Fields: fields} }

// Get returns the basic field f, if the match has it.
func (m Match) Get(f OXMField) (OXM, bool) {
	for _, o := range m.Fields {
		if o.IsBasic(f) {
			return o, true
		}
	}
	return OXM{}, false
}

// encodedLen is the size of the match on the wire, padding included.
func (m Match) encodedLen() int {
	n := 4
	for _, o := range m.Fields {
		n += o.encodedLen()
	}
	return n + pad8(n)
}

func (m Match) appendTo(b []byte) ([]byte, error) {
	start := len(b)
	b = appendU16(b, MatchTypeOXM)
	b = appendU16(b, 0)
	for _, o := range m.Fields {
		var err error
		if b, err = o.appendTo(b); err != nil {
			return b[:start], err
		}
	}
	n := len(b) - start
	if n > 0xffff {
		return b[:start], encodeErrorf("match of %d bytes", n)
	}
	putU16(b[start+2:], uint16(n))
	return appendZeros(b, pad8(n)), nil
}

func decodeMatch(d *decoder, what string) Match {
	mh := d.sub(4, what)
	typ := mh.u16()
	n := int(mh.u16())
	d.adopt(mh)
	if d.err != nil {
		return Match{}
	}
	if typ != MatchTypeOXM {
		d.off -= 4
		d.fail(ErrBadMatchType, "type %d", typ)
		return Match{}
	}
	if n < 4 {
		d.off -= 2
		d.fail(ErrBadLength, "match length %d", n)
		return Match{}
	}
	body := d.sub(n-4, what)
	var m Match
	for body.remaining() > 0 && body.err == nil {
		m.Fields = append(m.Fields, decodeOXM(body))
	}
	d.adopt(body)
	d.skip(pad8(n))
	if d.err != nil {
		return Match{}
	}
	return m
}

// Canonical returns the match in the form a switch keeps it: values masked
// by their masks, all-ones masks dropped, fully wildcarded fields dropped,
// fields sorted. Two matches select the same packets exactly when their
// canonical forms are Equal, whatever order and mask style they were
// written in.
func (m Match) Canonical() Match {
	out := Match{Fields: make([]OXM, 0, len(m.Fields))}
	for _, o := range m.Fields {
		c := OXM{Class: o.Class, Field: o.Field, Experimenter: o.Experimenter, Value: slices.Clone(o.Value)}
		if o.Mask != nil && len(o.Mask) == len(o.Value) {
			allOnes, allZeros := true, true
			for i, mb := range o.Mask {
				c.Value[i] &= mb
				allOnes = allOnes && mb == 0xff
				allZeros = allZeros && mb == 0
			}
			if allZeros {
				continue
			}
			if !allOnes {
				c.Mask = slices.Clone(o.Mask)
			}
		}
		out.Fields = append(out.Fields, c)
	}
	slices.SortStableFunc(out.Fields, func(a, b OXM) int {
		return cmp.Or(cmp.Compare(a.Class, b.Class), cmp.Compare(a.Experimenter, b.Experimenter), cmp.Compare(a.Field, b.Field))
	})
	return out
}

// Equal reports whether two matches have the same fields in the same order
// with the same values and masks; compare Canonical forms for semantic
// equality.
func (m Match) Equal(o Match) bool {
	return slices.EqualFunc(m.Fields, o.Fields, func(a, b OXM) bool {
		return a.Class == b.Class && a.Field == b.Field && a.Experimenter == b.Experimenter &&
			bytes.Equal(a.Value, b.Value) && bytes.Equal(a.Mask, b.Mask) && (a.Mask == nil) == (b.Mask == nil)
	})
}

// MarshalBinary encodes the match as an ofp_match, padding included; flow
// tables key entries by these bytes of the canonical form.
func (m Match) MarshalBinary() ([]byte, error) { return m.appendTo(nil) }
