package ofp13

import "net"

// Reasons for a PACKET_IN.
const (
	PacketInNoMatch    uint8 = 0
	PacketInAction     uint8 = 1
	PacketInInvalidTTL uint8 = 2
)

// PacketIn carries a packet from the switch to the controller.
type PacketIn struct {
	XID      uint32
	BufferID uint32
	TotalLen uint16
	Reason   uint8
	TableID  uint8
	Cookie   uint64
	Match    Match
	Data     []byte
}

func (m *PacketIn) MessageType() Type              { return TypePacketIn }
func (m *PacketIn) TransactionID() uint32          { return m.XID }
func (m *PacketIn) SetTransactionID(xid uint32)    { m.XID = xid }
func (m *PacketIn) MarshalBinary() ([]byte, error) { return m.AppendBinary(nil) }

func (m *PacketIn) AppendBinary(b []byte) ([]byte, error) {
	start := len(b)
	b = appendHeader(b, Version, TypePacketIn, m.XID)
	b = appendU32(b, m.BufferID)
	b = appendU16(b, m.TotalLen)
	b = append(b, m.Reason, m.TableID)
	b = appendU64(b, m.Cookie)
	b, err := m.Match.appendTo(b)
	if err != nil {
		return b[:start], err
	}
	b = appendZeros(b, 2)
	b = append(b, m.Data...)
	return finishMessage(b, start)
}

func (m *PacketIn) UnmarshalBinary(data []byte) error {
	d, xid, err := open13(data, TypePacketIn)
	if err != nil {
		return err
	}
	*m = PacketIn{XID: xid, BufferID: d.u32(), TotalLen: d.u16(), Reason: d.u8(), TableID: d.u8(), Cookie: d.u64()}
	m.Match = decodeMatch(d, "packet_in.match")
	d.skip(2)
	m.Data = d.rest()
	return d.err
}

// PacketOut sends a packet out of the switch through an action list.
type PacketOut struct {
	XID      uint32
	BufferID uint32
	InPort   uint32
	Actions  []Action
	Data     []byte
}

func (m *PacketOut) MessageType() Type              { return TypePacketOut }
func (m *PacketOut) TransactionID() uint32          { return m.XID }
func (m *PacketOut) SetTransactionID(xid uint32)    { m.XID = xid }
func (m *PacketOut) MarshalBinary() ([]byte, error) { return m.AppendBinary(nil) }

func (m *PacketOut) AppendBinary(b []byte) ([]byte, error) {
	start := len(b)
	b = appendHeader(b, Version, TypePacketOut, m.XID)
	b = appendU32(b, m.BufferID)
	b = appendU32(b, m.InPort)
	lenAt := len(b)
	b = appendU16(b, 0)
	b = appendZeros(b, 6)
	b, err := appendActions(b, m.Actions)
	if err != nil {
		return b[:start], err
	}
	n := len(b) - lenAt - 8
	if n > 0xffff {
		return b[:start], encodeErrorf("packet_out actions of %d bytes", n)
	}
	putU16(b[lenAt:], uint16(n))
	b = append(b, m.Data...)
	return finishMessage(b, start)
}

func (m *PacketOut) UnmarshalBinary(data []byte) error {
	d, xid, err := open13(data, TypePacketOut)
	if err != nil {
		return err
	}
	*m = PacketOut{XID: xid, BufferID: d.u32(), InPort: d.u32()}
	n := int(d.u16())
	d.skip(6)
	actions := d.sub(n, "packet_out.actions")
	m.Actions = decodeActions(actions)
	d.adopt(actions)
	m.Data = d.rest()
	return d.err
}

// PortLen is the size of an ofp_port.
const PortLen = 64

// Port describes a switch port (ofp_port).
type Port struct {
	PortNo     uint32
	HWAddr     net.HardwareAddr
	Name       string
	Config     uint32
	State      uint32
	Curr       uint32
	Advertised uint32
	Supported  uint32
	Peer       uint32
	CurrSpeed  uint32
	MaxSpeed   uint32
}

// Port config and state bits the controller looks at.
const (
	PortConfigDown uint32 = 1 << 0
	PortStateDown  uint32 = 1 << 0
)

func (p *Port) appendTo(b []byte) ([]byte, error) {
	start := len(b)
	if len(p.HWAddr) != 6 && len(p.HWAddr) != 0 {
		return b, encodeErrorf("port %d: hardware address of %d bytes", p.PortNo, len(p.HWAddr))
	}
	b = appendU32(b, p.PortNo)
	b = appendZeros(b, 4)
	b = append(b, p.HWAddr...)
	b = appendZeros(b, 6-len(p.HWAddr)+2)
	b, err := appendStr(b, p.Name, 16, "port name")
	if err != nil {
		return b[:start], err
	}
	for _, v := range []uint32{p.Config, p.State, p.Curr, p.Advertised, p.Supported, p.Peer, p.CurrSpeed, p.MaxSpeed} {
		b = appendU32(b, v)
	}
	return b, nil
}

func decodePort(d *decoder) Port {
	var p Port
	p.PortNo = d.u32()
	d.skip(4)
	p.HWAddr = d.bytes(6)
	d.skip(2)
	p.Name = d.str(16)
	p.Config, p.State, p.Curr, p.Advertised = d.u32(), d.u32(), d.u32(), d.u32()
	p.Supported, p.Peer, p.CurrSpeed, p.MaxSpeed = d.u32(), d.u32(), d.u32(), d.u32()
	return p
}

// Reasons for a PORT_STATUS.
const (
	PortAdded    uint8 = 0
	PortDeleted  uint8 = 1
	PortModified uint8 = 2
)

// PortStatus reports a port that was added, removed or changed.
type PortStatus struct {
	XID    uint32
	Reason uint8
	Port   Port
}

func (m *PortStatus) MessageType() Type              { return TypePortStatus }
func (m *PortStatus) TransactionID() uint32          { return m.XID }
func (m *PortStatus) SetTransactionID(xid uint32)    { m.XID = xid }
func (m *PortStatus) MarshalBinary() ([]byte, error) { return m.AppendBinary(nil) }

func (m *PortStatus) AppendBinary(b []byte) ([]byte, error) {
	start := len(b)
	b = appendHeader(b, Version, TypePortStatus, m.XID)
	b = append(b, m.Reason)
	b = appendZeros(b, 7)
	b, err := m.Port.appendTo(b)
	if err != nil {
		return b[:start], err
	}
	return finishMessage(b, start)
}

func (m *PortStatus) UnmarshalBinary(data []byte) error {
	d, xid, err := open13(data, TypePortStatus)
	if err != nil {
		return err
	}
	*m = PortStatus{XID: xid, Reason: d.u8()}
	d.skip(7)
	m.Port = decodePort(d)
	d.end()
	return d.err
}
