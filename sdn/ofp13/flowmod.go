package ofp13

import "fmt"

// FlowModCommand is the command of a FLOW_MOD.
type FlowModCommand uint8

// Flow mod commands.
const (
	FlowAdd          FlowModCommand = 0
	FlowModify       FlowModCommand = 1
	FlowModifyStrict FlowModCommand = 2
	FlowDelete       FlowModCommand = 3
	FlowDeleteStrict FlowModCommand = 4
)

func (c FlowModCommand) String() string {
	switch c {
	case FlowAdd:
		return "ADD"
	case FlowModify:
		return "MOD"
	case FlowModifyStrict:
		return "MOD_STRICT"
	case FlowDelete:
		return "DEL"
	case FlowDeleteStrict:
		return "DEL_STRICT"
	}
	return fmt.Sprintf("cmd:%d", uint8(c))
}

// Flow mod flags (ofp_flow_mod_flags).
const (
	FlowFlagSendFlowRem  uint16 = 1 << 0
	FlowFlagCheckOverlap uint16 = 1 << 1
	FlowFlagResetCounts  uint16 = 1 << 2
	FlowFlagNoPktCounts  uint16 = 1 << 3
	FlowFlagNoBytCounts  uint16 = 1 << 4
)

// TableAll selects every table in a delete or a flow stats request.
const TableAll uint8 = 0xff

// NoBuffer is the buffer id of a message that carries its packet itself.
const NoBuffer uint32 = 0xffffffff

// FlowMod adds, modifies or deletes flow entries.
type FlowMod struct {
	XID uint32
	// Cookie is the flow's cookie on add; with CookieMask it restricts
	// which flows a modify or delete touches.
	Cookie      uint64
	CookieMask  uint64
	TableID     uint8
	Command     FlowModCommand
	IdleTimeout uint16
	HardTimeout uint16
	Priority    uint16
	BufferID    uint32
	// OutPort and OutGroup restrict deletes; PortAny and GroupAny do not.
	OutPort      uint32
	OutGroup     uint32
	Flags        uint16
	Match        Match
	Instructions []Instruction
}

// NewFlowMod returns a flow mod with the fields that mean "no restriction"
// set: no buffer, any out port, any out group.
func NewFlowMod(cmd FlowModCommand) *FlowMod {
	return &FlowMod{Command: cmd, BufferID: NoBuffer, OutPort: PortAny, OutGroup: GroupAny}
}

func (m *FlowMod) MessageType() Type              { return TypeFlowMod }
func (m *FlowMod) TransactionID() uint32          { return m.XID }
func (m *FlowMod) SetTransactionID(xid uint32)    { m.XID = xid }
func (m *FlowMod) MarshalBinary() ([]byte, error) { return m.AppendBinary(nil) }

func (m *FlowMod) AppendBinary(b []byte) ([]byte, error) {
	start := len(b)
	b = appendHeader(b, Version, TypeFlowMod, m.XID)
	b = appendU64(b, m.Cookie)
	b = appendU64(b, m.CookieMask)
	b = append(b, m.TableID, byte(m.Command))
	b = appendU16(b, m.IdleTimeout)
	b = appendU16(b, m.HardTimeout)
	b = appendU16(b, m.Priority)
	b = appendU32(b, m.BufferID)
	b = appendU32(b, m.OutPort)
	b = appendU32(b, m.OutGroup)
	b = appendU16(b, m.Flags)
	b = appendZeros(b, 2)
	b, err := m.Match.appendTo(b)
	if err != nil {
		return b[:start], err
	}
	if b, err = appendInstructions(b, m.Instructions); err != nil {
		return b[:start], err
	}
	return finishMessage(b, start)
}

func (m *FlowMod) UnmarshalBinary(data []byte) error {
	d, xid, err := open13(data, TypeFlowMod)
	if err != nil {
		return err
	}
	*m = FlowMod{XID: xid, Cookie: d.u64(), CookieMask: d.u64(), TableID: d.u8(), Command: FlowModCommand(d.u8()),
		IdleTimeout: d.u16(), HardTimeout: d.u16(), Priority: d.u16(), BufferID: d.u32(), OutPort: d.u32(),
		OutGroup: d.u32(), Flags: d.u16()}
	d.skip(2)
	m.Match = decodeMatch(d, "flow_mod.match")
	m.Instructions = decodeInstructions(d)
	return d.err
}

// Reasons a flow was removed.
const (
	RemovedIdleTimeout uint8 = 0
	RemovedHardTimeout uint8 = 1
	RemovedDelete      uint8 = 2
	RemovedGroupDelete uint8 = 3
)

// FlowRemoved tells the controller a flow with FlowFlagSendFlowRem left
// the table.
type FlowRemoved struct {
	XID          uint32
	Cookie       uint64
	Priority     uint16
	Reason       uint8
	TableID      uint8
	DurationSec  uint32
	DurationNsec uint32
	IdleTimeout  uint16
	HardTimeout  uint16
	PacketCount  uint64
	ByteCount    uint64
	Match        Match
}

func (m *FlowRemoved) MessageType() Type              { return TypeFlowRemoved }
func (m *FlowRemoved) TransactionID() uint32          { return m.XID }
func (m *FlowRemoved) SetTransactionID(xid uint32)    { m.XID = xid }
func (m *FlowRemoved) MarshalBinary() ([]byte, error) { return m.AppendBinary(nil) }

func (m *FlowRemoved) AppendBinary(b []byte) ([]byte, error) {
	start := len(b)
	b = appendHeader(b, Version, TypeFlowRemoved, m.XID)
	b = appendU64(b, m.Cookie)
	b = appendU16(b, m.Priority)
	b = append(b, m.Reason, m.TableID)
	b = appendU32(b, m.DurationSec)
	b = appendU32(b, m.DurationNsec)
	b = appendU16(b, m.IdleTimeout)
	b = appendU16(b, m.HardTimeout)
	b = appendU64(b, m.PacketCount)
	b = appendU64(b, m.ByteCount)
	b, err := m.Match.appendTo(b)
	if err != nil {
		return b[:start], err
	}
	return finishMessage(b, start)
}

func (m *FlowRemoved) UnmarshalBinary(data []byte) error {
	d, xid, err := open13(data, TypeFlowRemoved)
	if err != nil {
		return err
	}
	*m = FlowRemoved{XID: xid, Cookie: d.u64(), Priority: d.u16(), Reason: d.u8(), TableID: d.u8(),
		DurationSec: d.u32(), DurationNsec: d.u32(), IdleTimeout: d.u16(), HardTimeout: d.u16(),
		PacketCount: d.u64(), ByteCount: d.u64()}
	m.Match = decodeMatch(d, "flow_removed.match")
	d.end()
	return d.err
}
