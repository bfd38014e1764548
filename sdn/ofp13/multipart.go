package ofp13

import (
	"encoding/binary"
	"fmt"
)

// MultipartType is the kind of a MULTIPART request or reply.
type MultipartType uint16

// Multipart kinds of OpenFlow 1.3.
const (
	MultipartDesc          MultipartType = 0
	MultipartFlow          MultipartType = 1
	MultipartAggregate     MultipartType = 2
	MultipartTable         MultipartType = 3
	MultipartPortStats     MultipartType = 4
	MultipartQueue         MultipartType = 5
	MultipartGroup         MultipartType = 6
	MultipartGroupDesc     MultipartType = 7
	MultipartGroupFeatures MultipartType = 8
	MultipartMeter         MultipartType = 9
	MultipartMeterConfig   MultipartType = 10
	MultipartMeterFeatures MultipartType = 11
	MultipartTableFeatures MultipartType = 12
	MultipartPortDesc      MultipartType = 13
	MultipartExperimenter  MultipartType = 0xffff
)

var multipartNames = map[MultipartType]string{
	0: "DESC", 1: "FLOW", 2: "AGGREGATE", 3: "TABLE", 4: "PORT", 5: "QUEUE", 6: "GROUP", 7: "GROUP_DESC",
	8: "GROUP_FEATURES", 9: "METER", 10: "METER_CONFIG", 11: "METER_FEATURES", 12: "TABLE_FEATURES",
	13: "PORT_DESC", 0xffff: "EXPERIMENTER",
}

func (t MultipartType) String() string {
	if s, ok := multipartNames[t]; ok {
		return s
	}
	return fmt.Sprintf("MULTIPART_%d", uint16(t))
}

// MultipartMore is the flag of a multipart message that more parts follow.
const MultipartMore uint16 = 1

// Multipart is a MULTIPART request or reply of any kind.
type Multipart interface {
	Message
	MultipartType() MultipartType
	// MultipartFlags has MultipartMore set while more parts follow.
	MultipartFlags() uint16
}

const multipartHeaderLen = HeaderLen + 8

func newMultipart(data []byte) (Message, error) {
	if len(data) < multipartHeaderLen {
		return nil, &DecodeError{What: "multipart header", Err: ErrTruncated,
			Detail: fmt.Sprintf("need %d bytes, have %d", multipartHeaderLen, len(data))}
	}
	reply := Type(data[1]) == TypeMultipartReply
	switch MultipartType(binary.BigEndian.Uint16(data[8:10])) {
	case MultipartDesc:
		if reply {
			return new(DescReply), nil
		}
		return new(DescRequest), nil
	case MultipartFlow:
		if reply {
			return new(FlowStatsReply), nil
		}
		return new(FlowStatsRequest), nil
	case MultipartTable:
		if reply {
			return new(TableStatsReply), nil
		}
		return new(TableStatsRequest), nil
	case MultipartPortDesc:
		if reply {
			return new(PortDescReply), nil
		}
		return new(PortDescRequest), nil
	}
	return new(MultipartRaw), nil
}

func multipartMsgType(reply bool) Type {
	if reply {
		return TypeMultipartReply
	}
	return TypeMultipartRequest
}

func appendMultipartHeader(b []byte, reply bool, xid uint32, t MultipartType, flags uint16) []byte {
	b = appendHeader(b, Version, multipartMsgType(reply), xid)
	b = appendU16(b, uint16(t))
	b = appendU16(b, flags)
	return appendZeros(b, 4)
}

// openMultipart checks the headers and returns a decoder over the body.
func openMultipart(data []byte, reply bool, t MultipartType) (d *decoder, xid uint32, flags uint16, err error) {
	d, xid, err = open13(data, multipartMsgType(reply))
	if err != nil {
		return nil, 0, 0, err
	}
	got := MultipartType(d.u16())
	flags = d.u16()
	d.skip(4)
	if d.err != nil {
		return nil, 0, 0, d.err
	}
	if got != t {
		return nil, 0, 0, &DecodeError{What: "multipart " + t.String(), Offset: HeaderLen, Err: ErrWrongType, Detail: "got " + got.String()}
	}
	d.what = fmt.Sprintf("multipart %s %s", t, map[bool]string{false: "request", true: "reply"}[reply])
	return d, xid, flags, nil
}

// emptyMultipart encodes or decodes the requests that have no body.
func appendEmptyMultipart(b []byte, reply bool, xid uint32, t MultipartType, flags uint16) ([]byte, error) {
	start := len(b)
	b = appendMultipartHeader(b, reply, xid, t, flags)
	return finishMessage(b, start)
}

func unmarshalEmptyMultipart(data []byte, reply bool, t MultipartType) (uint32, uint16, error) {
	d, xid, flags, err := openMultipart(data, reply, t)
	if err != nil {
		return 0, 0, err
	}
	d.end()
	return xid, flags, d.err
}

// DescRequest asks for the switch description.
type DescRequest struct {
	XID   uint32
	Flags uint16
}

func (m *DescRequest) MessageType() Type              { return TypeMultipartRequest }
func (m *DescRequest) MultipartType() MultipartType   { return MultipartDesc }
func (m *DescRequest) MultipartFlags() uint16         { return m.Flags }
func (m *DescRequest) TransactionID() uint32          { return m.XID }
func (m *DescRequest) SetTransactionID(xid uint32)    { m.XID = xid }
func (m *DescRequest) MarshalBinary() ([]byte, error) { return m.AppendBinary(nil) }
func (m *DescRequest) AppendBinary(b []byte) ([]byte, error) {
	return appendEmptyMultipart(b, false, m.XID, MultipartDesc, m.Flags)
}
func (m *DescRequest) UnmarshalBinary(data []byte) error {
	xid, flags, err := unmarshalEmptyMultipart(data, false, MultipartDesc)
	*m = DescRequest{XID: xid, Flags: flags}
	return err
}

// Desc is the switch description.
type Desc struct {
	Manufacturer string
	Hardware     string
	Software     string
	SerialNumber string
	Datapath     string
}

// DescReply carries the switch description.
type DescReply struct {
	XID   uint32
	Flags uint16
	Desc  Desc
}

func (m *DescReply) MessageType() Type              { return TypeMultipartReply }
func (m *DescReply) MultipartType() MultipartType   { return MultipartDesc }
func (m *DescReply) MultipartFlags() uint16         { return m.Flags }
func (m *DescReply) TransactionID() uint32          { return m.XID }
func (m *DescReply) SetTransactionID(xid uint32)    { m.XID = xid }
func (m *DescReply) MarshalBinary() ([]byte, error) { return m.AppendBinary(nil) }

func (m *DescReply) AppendBinary(b []byte) ([]byte, error) {
	start := len(b)
	b = appendMultipartHeader(b, true, m.XID, MultipartDesc, m.Flags)
	var err error
	for _, f := range []struct {
		s    string
		n    int
		name string
	}{{m.Desc.Manufacturer, 256, "mfr_desc"}, {m.Desc.Hardware, 256, "hw_desc"}, {m.Desc.Software, 256, "sw_desc"},
		{m.Desc.SerialNumber, 32, "serial_num"}, {m.Desc.Datapath, 256, "dp_desc"}} {
		if b, err = appendStr(b, f.s, f.n, f.name); err != nil {
			return b[:start], err
		}
	}
	return finishMessage(b, start)
}

func (m *DescReply) UnmarshalBinary(data []byte) error {
	d, xid, flags, err := openMultipart(data, true, MultipartDesc)
	if err != nil {
		return err
	}
	*m = DescReply{XID: xid, Flags: flags, Desc: Desc{
		Manufacturer: d.str(256), Hardware: d.str(256), Software: d.str(256), SerialNumber: d.str(32), Datapath: d.str(256)}}
	d.end()
	return d.err
}

// FlowStatsRequest asks for the flow entries that match, e.g. every flow
// whose cookie carries a prefix (Cookie/CookieMask) in every table.
type FlowStatsRequest struct {
	XID        uint32
	Flags      uint16
	TableID    uint8
	OutPort    uint32
	OutGroup   uint32
	Cookie     uint64
	CookieMask uint64
	Match      Match
}

// NewFlowStatsRequest asks for every flow in every table whose cookie
// matches cookie under mask.
func NewFlowStatsRequest(cookie, mask uint64) *FlowStatsRequest {
	return &FlowStatsRequest{TableID: TableAll, OutPort: PortAny, OutGroup: GroupAny, Cookie: cookie, CookieMask: mask}
}

func (m *FlowStatsRequest) MessageType() Type              { return TypeMultipartRequest }
func (m *FlowStatsRequest) MultipartType() MultipartType   { return MultipartFlow }
func (m *FlowStatsRequest) MultipartFlags() uint16         { return m.Flags }
func (m *FlowStatsRequest) TransactionID() uint32          { return m.XID }
func (m *FlowStatsRequest) SetTransactionID(xid uint32)    { m.XID = xid }
func (m *FlowStatsRequest) MarshalBinary() ([]byte, error) { return m.AppendBinary(nil) }

func (m *FlowStatsRequest) AppendBinary(b []byte) ([]byte, error) {
	start := len(b)
	b = appendMultipartHeader(b, false, m.XID, MultipartFlow, m.Flags)
	b = append(b, m.TableID)
	b = appendZeros(b, 3)
	b = appendU32(b, m.OutPort)
	b = appendU32(b, m.OutGroup)
	b = appendZeros(b, 4)
	b = appendU64(b, m.Cookie)
	b = appendU64(b, m.CookieMask)
	b, err := m.Match.appendTo(b)
	if err != nil {
		return b[:start], err
	}
	return finishMessage(b, start)
}

func (m *FlowStatsRequest) UnmarshalBinary(data []byte) error {
	d, xid, flags, err := openMultipart(data, false, MultipartFlow)
	if err != nil {
		return err
	}
	*m = FlowStatsRequest{XID: xid, Flags: flags, TableID: d.u8()}
	d.skip(3)
	m.OutPort, m.OutGroup = d.u32(), d.u32()
	d.skip(4)
	m.Cookie, m.CookieMask = d.u64(), d.u64()
	m.Match = decodeMatch(d, "flow_stats_request.match")
	d.end()
	return d.err
}

// FlowStats is one flow entry as the switch reports it.
type FlowStats struct {
	TableID      uint8
	DurationSec  uint32
	DurationNsec uint32
	Priority     uint16
	IdleTimeout  uint16
	HardTimeout  uint16
	Flags        uint16
	Cookie       uint64
	PacketCount  uint64
	ByteCount    uint64
	Match        Match
	Instructions []Instruction
}

const flowStatsFixedLen = 48

func (s *FlowStats) appendTo(b []byte) ([]byte, error) {
	start := len(b)
	b = appendU16(b, 0)
	b = append(b, s.TableID, 0)
	b = appendU32(b, s.DurationSec)
	b = appendU32(b, s.DurationNsec)
	b = appendU16(b, s.Priority)
	b = appendU16(b, s.IdleTimeout)
	b = appendU16(b, s.HardTimeout)
	b = appendU16(b, s.Flags)
	b = appendZeros(b, 4)
	b = appendU64(b, s.Cookie)
	b = appendU64(b, s.PacketCount)
	b = appendU64(b, s.ByteCount)
	b, err := s.Match.appendTo(b)
	if err != nil {
		return b[:start], err
	}
	if b, err = appendInstructions(b, s.Instructions); err != nil {
		return b[:start], err
	}
	n := len(b) - start
	if n > 0xffff {
		return b[:start], encodeErrorf("flow stats entry of %d bytes", n)
	}
	putU16(b[start:], uint16(n))
	return b, nil
}

func decodeFlowStats(d *decoder) FlowStats {
	n := int(d.u16())
	if d.err != nil {
		return FlowStats{}
	}
	if n < flowStatsFixedLen+8 {
		d.off -= 2
		d.fail(ErrBadLength, "flow stats entry length %d", n)
		return FlowStats{}
	}
	e := d.sub(n-2, "flow_stats")
	defer d.adopt(e)
	s := FlowStats{TableID: e.u8()}
	e.skip(1)
	s.DurationSec, s.DurationNsec = e.u32(), e.u32()
	s.Priority, s.IdleTimeout, s.HardTimeout, s.Flags = e.u16(), e.u16(), e.u16(), e.u16()
	e.skip(4)
	s.Cookie, s.PacketCount, s.ByteCount = e.u64(), e.u64(), e.u64()
	s.Match = decodeMatch(e, "flow_stats.match")
	s.Instructions = decodeInstructions(e)
	return s
}

// FlowStatsReply carries flow entries; a long table spans several replies
// with MultipartMore set on all but the last.
type FlowStatsReply struct {
	XID   uint32
	Flags uint16
	Stats []FlowStats
}

func (m *FlowStatsReply) MessageType() Type              { return TypeMultipartReply }
func (m *FlowStatsReply) MultipartType() MultipartType   { return MultipartFlow }
func (m *FlowStatsReply) MultipartFlags() uint16         { return m.Flags }
func (m *FlowStatsReply) TransactionID() uint32          { return m.XID }
func (m *FlowStatsReply) SetTransactionID(xid uint32)    { m.XID = xid }
func (m *FlowStatsReply) MarshalBinary() ([]byte, error) { return m.AppendBinary(nil) }

func (m *FlowStatsReply) AppendBinary(b []byte) ([]byte, error) {
	start := len(b)
	b = appendMultipartHeader(b, true, m.XID, MultipartFlow, m.Flags)
	for i := range m.Stats {
		var err error
		if b, err = m.Stats[i].appendTo(b); err != nil {
			return b[:start], err
		}
	}
	return finishMessage(b, start)
}

func (m *FlowStatsReply) UnmarshalBinary(data []byte) error {
	d, xid, flags, err := openMultipart(data, true, MultipartFlow)
	if err != nil {
		return err
	}
	*m = FlowStatsReply{XID: xid, Flags: flags}
	for d.remaining() > 0 && d.err == nil {
		m.Stats = append(m.Stats, decodeFlowStats(d))
	}
	return d.err
}

// TableStatsRequest asks for per-table counters.
type TableStatsRequest struct {
	XID   uint32
	Flags uint16
}

func (m *TableStatsRequest) MessageType() Type              { return TypeMultipartRequest }
func (m *TableStatsRequest) MultipartType() MultipartType   { return MultipartTable }
func (m *TableStatsRequest) MultipartFlags() uint16         { return m.Flags }
func (m *TableStatsRequest) TransactionID() uint32          { return m.XID }
func (m *TableStatsRequest) SetTransactionID(xid uint32)    { m.XID = xid }
func (m *TableStatsRequest) MarshalBinary() ([]byte, error) { return m.AppendBinary(nil) }
func (m *TableStatsRequest) AppendBinary(b []byte) ([]byte, error) {
	return appendEmptyMultipart(b, false, m.XID, MultipartTable, m.Flags)
}
func (m *TableStatsRequest) UnmarshalBinary(data []byte) error {
	xid, flags, err := unmarshalEmptyMultipart(data, false, MultipartTable)
	*m = TableStatsRequest{XID: xid, Flags: flags}
	return err
}

// TableStats are the counters of one table.
type TableStats struct {
	TableID      uint8
	ActiveCount  uint32
	LookupCount  uint64
	MatchedCount uint64
}

const tableStatsLen = 24

// TableStatsReply carries per-table counters.
type TableStatsReply struct {
	XID   uint32
	Flags uint16
	Stats []TableStats
}

func (m *TableStatsReply) MessageType() Type              { return TypeMultipartReply }
func (m *TableStatsReply) MultipartType() MultipartType   { return MultipartTable }
func (m *TableStatsReply) MultipartFlags() uint16         { return m.Flags }
func (m *TableStatsReply) TransactionID() uint32          { return m.XID }
func (m *TableStatsReply) SetTransactionID(xid uint32)    { m.XID = xid }
func (m *TableStatsReply) MarshalBinary() ([]byte, error) { return m.AppendBinary(nil) }

func (m *TableStatsReply) AppendBinary(b []byte) ([]byte, error) {
	start := len(b)
	b = appendMultipartHeader(b, true, m.XID, MultipartTable, m.Flags)
	for _, s := range m.Stats {
		b = append(b, s.TableID, 0, 0, 0)
		b = appendU32(b, s.ActiveCount)
		b = appendU64(b, s.LookupCount)
		b = appendU64(b, s.MatchedCount)
	}
	return finishMessage(b, start)
}

func (m *TableStatsReply) UnmarshalBinary(data []byte) error {
	d, xid, flags, err := openMultipart(data, true, MultipartTable)
	if err != nil {
		return err
	}
	*m = TableStatsReply{XID: xid, Flags: flags}
	if d.remaining()%tableStatsLen != 0 {
		d.fail(ErrBadLength, "%d bytes of table stats is not a multiple of %d", d.remaining(), tableStatsLen)
		return d.err
	}
	for d.remaining() > 0 && d.err == nil {
		s := TableStats{TableID: d.u8()}
		d.skip(3)
		s.ActiveCount, s.LookupCount, s.MatchedCount = d.u32(), d.u64(), d.u64()
		m.Stats = append(m.Stats, s)
	}
	return d.err
}

// PortDescRequest asks for the description of every port.
type PortDescRequest struct {
	XID   uint32
	Flags uint16
}

func (m *PortDescRequest) MessageType() Type              { return TypeMultipartRequest }
func (m *PortDescRequest) MultipartType() MultipartType   { return MultipartPortDesc }
func (m *PortDescRequest) MultipartFlags() uint16         { return m.Flags }
func (m *PortDescRequest) TransactionID() uint32          { return m.XID }
func (m *PortDescRequest) SetTransactionID(xid uint32)    { m.XID = xid }
func (m *PortDescRequest) MarshalBinary() ([]byte, error) { return m.AppendBinary(nil) }
func (m *PortDescRequest) AppendBinary(b []byte) ([]byte, error) {
	return appendEmptyMultipart(b, false, m.XID, MultipartPortDesc, m.Flags)
}
func (m *PortDescRequest) UnmarshalBinary(data []byte) error {
	xid, flags, err := unmarshalEmptyMultipart(data, false, MultipartPortDesc)
	*m = PortDescRequest{XID: xid, Flags: flags}
	return err
}

// PortDescReply describes the switch's ports.
type PortDescReply struct {
	XID   uint32
	Flags uint16
	Ports []Port
}

func (m *PortDescReply) MessageType() Type              { return TypeMultipartReply }
func (m *PortDescReply) MultipartType() MultipartType   { return MultipartPortDesc }
func (m *PortDescReply) MultipartFlags() uint16         { return m.Flags }
func (m *PortDescReply) TransactionID() uint32          { return m.XID }
func (m *PortDescReply) SetTransactionID(xid uint32)    { m.XID = xid }
func (m *PortDescReply) MarshalBinary() ([]byte, error) { return m.AppendBinary(nil) }

func (m *PortDescReply) AppendBinary(b []byte) ([]byte, error) {
	start := len(b)
	b = appendMultipartHeader(b, true, m.XID, MultipartPortDesc, m.Flags)
	for i := range m.Ports {
		var err error
		if b, err = m.Ports[i].appendTo(b); err != nil {
			return b[:start], err
		}
	}
	return finishMessage(b, start)
}

func (m *PortDescReply) UnmarshalBinary(data []byte) error {
	d, xid, flags, err := openMultipart(data, true, MultipartPortDesc)
	if err != nil {
		return err
	}
	*m = PortDescReply{XID: xid, Flags: flags}
	if d.remaining()%PortLen != 0 {
		d.fail(ErrBadLength, "%d bytes of ports is not a multiple of %d", d.remaining(), PortLen)
		return d.err
	}
	for d.remaining() > 0 && d.err == nil {
		m.Ports = append(m.Ports, decodePort(d))
	}
	return d.err
}

// MultipartRaw is a multipart request or reply of a kind this package does
// not model (TABLE_FEATURES, GROUP_DESC, ...), kept with its body.
type MultipartRaw struct {
	Reply bool
	XID   uint32
	Type  MultipartType
	Flags uint16
	Body  []byte
}

func (m *MultipartRaw) MessageType() Type              { return multipartMsgType(m.Reply) }
func (m *MultipartRaw) MultipartType() MultipartType   { return m.Type }
func (m *MultipartRaw) MultipartFlags() uint16         { return m.Flags }
func (m *MultipartRaw) TransactionID() uint32          { return m.XID }
func (m *MultipartRaw) SetTransactionID(xid uint32)    { m.XID = xid }
func (m *MultipartRaw) MarshalBinary() ([]byte, error) { return m.AppendBinary(nil) }

func (m *MultipartRaw) AppendBinary(b []byte) ([]byte, error) {
	start := len(b)
	b = appendMultipartHeader(b, m.Reply, m.XID, m.Type, m.Flags)
	b = append(b, m.Body...)
	return finishMessage(b, start)
}

func (m *MultipartRaw) UnmarshalBinary(data []byte) error {
	if len(data) < 2 {
		return &DecodeError{What: "multipart", Err: ErrTruncated}
	}
	reply := Type(data[1]) == TypeMultipartReply
	if len(data) < multipartHeaderLen {
		// Let openMultipart name the fault precisely.
		_, _, _, err := openMultipart(data, reply, 0)
		return err
	}
	t := MultipartType(binary.BigEndian.Uint16(data[8:10]))
	d, xid, flags, err := openMultipart(data, reply, t)
	if err != nil {
		return err
	}
	*m = MultipartRaw{Reply: reply, XID: xid, Type: t, Flags: flags, Body: d.rest()}
	return d.err
}
