package ofp13

import (
	"encoding/binary"
	"fmt"
)

// Version is the OpenFlow 1.3 wire version.
const Version uint8 = 0x04

// HeaderLen is the size of the header every message starts with.
const HeaderLen = 8

// MaxMessageLen is the largest message the 16-bit length field allows.
const MaxMessageLen = 0xffff

// Type is an OpenFlow message type (ofp_type).
type Type uint8

// Message types of OpenFlow 1.3.
const (
	TypeHello                 Type = 0
	TypeError                 Type = 1
	TypeEchoRequest           Type = 2
	TypeEchoReply             Type = 3
	TypeExperimenter          Type = 4
	TypeFeaturesRequest       Type = 5
	TypeFeaturesReply         Type = 6
	TypeGetConfigRequest      Type = 7
	TypeGetConfigReply        Type = 8
	TypeSetConfig             Type = 9
	TypePacketIn              Type = 10
	TypeFlowRemoved           Type = 11
	TypePortStatus            Type = 12
	TypePacketOut             Type = 13
	TypeFlowMod               Type = 14
	TypeGroupMod              Type = 15
	TypePortMod               Type = 16
	TypeTableMod              Type = 17
	TypeMultipartRequest      Type = 18
	TypeMultipartReply        Type = 19
	TypeBarrierRequest        Type = 20
	TypeBarrierReply          Type = 21
	TypeQueueGetConfigRequest Type = 22
	TypeQueueGetConfigReply   Type = 23
	TypeRoleRequest           Type = 24
	TypeRoleReply             Type = 25
	TypeGetAsyncRequest       Type = 26
	TypeGetAsyncReply         Type = 27
	TypeSetAsync              Type = 28
	TypeMeterMod              Type = 29
)

var typeNames = [...]string{
	"OFPT_HELLO", "OFPT_ERROR", "OFPT_ECHO_REQUEST", "OFPT_ECHO_REPLY", "OFPT_EXPERIMENTER",
	"OFPT_FEATURES_REQUEST", "OFPT_FEATURES_REPLY", "OFPT_GET_CONFIG_REQUEST", "OFPT_GET_CONFIG_REPLY",
	"OFPT_SET_CONFIG", "OFPT_PACKET_IN", "OFPT_FLOW_REMOVED", "OFPT_PORT_STATUS", "OFPT_PACKET_OUT",
	"OFPT_FLOW_MOD", "OFPT_GROUP_MOD", "OFPT_PORT_MOD", "OFPT_TABLE_MOD", "OFPT_MULTIPART_REQUEST",
	"OFPT_MULTIPART_REPLY", "OFPT_BARRIER_REQUEST", "OFPT_BARRIER_REPLY", "OFPT_QUEUE_GET_CONFIG_REQUEST",
	"OFPT_QUEUE_GET_CONFIG_REPLY", "OFPT_ROLE_REQUEST", "OFPT_ROLE_REPLY", "OFPT_GET_ASYNC_REQUEST",
	"OFPT_GET_ASYNC_REPLY", "OFPT_SET_ASYNC", "OFPT_METER_MOD",
}

func (t Type) String() string {
	if int(t) < len(typeNames) {
		return typeNames[t]
	}
	return fmt.Sprintf("OFPT_%d", uint8(t))
}

// Header is the fixed start of every message.
type Header struct {
	Version uint8
	Type    Type
	Length  uint16
	XID     uint32
}

// ParseHeader reads the header at the start of b, e.g. to learn how many
// bytes of a stream make up the next message.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderLen {
		return Header{}, &DecodeError{What: "header", Err: ErrTruncated, Detail: fmt.Sprintf("need %d bytes, have %d", HeaderLen, len(b))}
	}
	h := Header{Version: b[0], Type: Type(b[1]), Length: binary.BigEndian.Uint16(b[2:4]), XID: binary.BigEndian.Uint32(b[4:8])}
	if h.Version == 0 {
		// No OpenFlow version 0 exists; rejecting it lets a zero Version
		// field in Hello and Error mean "0x04" when encoding.
		return h, &DecodeError{What: "header", Err: ErrBadVersion, Detail: "version 0x00"}
	}
	if h.Length < HeaderLen {
		return h, &DecodeError{What: "header", Offset: 2, Err: ErrBadLength, Detail: fmt.Sprintf("length %d is below the header size", h.Length)}
	}
	return h, nil
}

// Message is one OpenFlow message.
type Message interface {
	// MessageType is the header type of the message.
	MessageType() Type
	// TransactionID is the header xid.
	TransactionID() uint32
	// SetTransactionID sets the header xid, as a connection does when it
	// sends the message.
	SetTransactionID(xid uint32)
	MarshalBinary() ([]byte, error)
	AppendBinary(b []byte) ([]byte, error)
	UnmarshalBinary(data []byte) error
}

// Unmarshal decodes exactly one message, which must fill data. Message
// types this package does not model come back as *Raw, multipart kinds it
// does not model as *MultipartRaw.
func Unmarshal(data []byte) (Message, error) {
	h, err := ParseHeader(data)
	if err != nil {
		return nil, err
	}
	if int(h.Length) != len(data) {
		return nil, &DecodeError{What: "header", Offset: 2, Err: ErrBadLength,
			Detail: fmt.Sprintf("length field %d, message has %d bytes", h.Length, len(data))}
	}
	var m Message
	switch h.Type {
	case TypeHello:
		m = new(Hello)
	case TypeError:
		m = new(Error)
	}
	if m == nil && h.Version != Version {
		return nil, &DecodeError{What: h.Type.String(), Err: ErrBadVersion, Detail: fmt.Sprintf("version 0x%02x", h.Version)}
	}
	switch h.Type {
	case TypeEchoRequest:
		m = new(EchoRequest)
	case TypeEchoReply:
		m = new(EchoReply)
	case TypeFeaturesRequest:
		m = new(FeaturesRequest)
	case TypeFeaturesReply:
		m = new(FeaturesReply)
	case TypeGetConfigRequest:
		m = new(GetConfigRequest)
	case TypeGetConfigReply:
		m = new(GetConfigReply)
	case TypeSetConfig:
		m = new(SetConfig)
	case TypePacketIn:
		m = new(PacketIn)
	case TypeFlowRemoved:
		m = new(FlowRemoved)
	case TypePortStatus:
		m = new(PortStatus)
	case TypePacketOut:
		m = new(PacketOut)
	case TypeFlowMod:
		m = new(FlowMod)
	case TypeBarrierRequest:
		m = new(BarrierRequest)
	case TypeBarrierReply:
		m = new(BarrierReply)
	case TypeRoleRequest:
		m = new(RoleRequest)
	case TypeRoleReply:
		m = new(RoleReply)
	case TypeExperimenter:
		if isRoleStatus(data) {
			m = new(RoleStatus)
		}
	case TypeMultipartRequest, TypeMultipartReply:
		m, err = newMultipart(data)
		if err != nil {
			return nil, err
		}
	}
	if m == nil {
		m = new(Raw)
	}
	if err := m.UnmarshalBinary(data); err != nil {
		return nil, err
	}
	return m, nil
}

// Raw is a message of a type this package does not model (GROUP_MOD,
// ROLE_REQUEST, EXPERIMENTER, ...), kept whole so it can be logged or
// passed on.
type Raw struct {
	Version uint8
	Type    Type
	XID     uint32
	Body    []byte
}

func (m *Raw) MessageType() Type              { return m.Type }
func (m *Raw) TransactionID() uint32          { return m.XID }
func (m *Raw) SetTransactionID(xid uint32)    { m.XID = xid }
func (m *Raw) MarshalBinary() ([]byte, error) { return m.AppendBinary(nil) }

func (m *Raw) AppendBinary(b []byte) ([]byte, error) {
	start := len(b)
	b = appendHeader(b, m.Version, m.Type, m.XID)
	b = append(b, m.Body...)
	return finishMessage(b, start)
}

func (m *Raw) UnmarshalBinary(data []byte) error {
	h, err := ParseHeader(data)
	if err != nil {
		return err
	}
	d, err := openBody(data, h.Type, h.Version)
	if err != nil {
		return err
	}
	*m = Raw{Version: h.Version, Type: h.Type, XID: h.XID, Body: d.rest()}
	return d.err
}

func appendHeader(b []byte, version uint8, t Type, xid uint32) []byte {
	b = append(b, version, byte(t), 0, 0)
	return appendU32(b, xid)
}

// finishMessage writes the length of the message that starts at b[start:].
func finishMessage(b []byte, start int) ([]byte, error) {
	n := len(b) - start
	if n > MaxMessageLen {
		return b[:start], encodeErrorf("message of %d bytes exceeds %d", n, MaxMessageLen)
	}
	putU16(b[start+2:], uint16(n))
	return b, nil
}

// openBody checks the header of data for message type t with the given
// version and returns a decoder over the body.
func openBody(data []byte, t Type, version uint8) (*decoder, error) {
	h, err := ParseHeader(data)
	if err != nil {
		return nil, err
	}
	if h.Type != t {
		return nil, &DecodeError{What: t.String(), Offset: 1, Err: ErrWrongType, Detail: "got " + h.Type.String()}
	}
	if h.Version != version {
		return nil, &DecodeError{What: t.String(), Err: ErrBadVersion, Detail: fmt.Sprintf("version 0x%02x", h.Version)}
	}
	if int(h.Length) != len(data) {
		return nil, &DecodeError{What: t.String(), Offset: 2, Err: ErrBadLength,
			Detail: fmt.Sprintf("length field %d, message has %d bytes", h.Length, len(data))}
	}
	return newDecoder(data[HeaderLen:], HeaderLen, t.String()), nil
}

// open13 is openBody for the messages that only exist in OpenFlow 1.3.
func open13(data []byte, t Type) (*decoder, uint32, error) {
	d, err := openBody(data, t, Version)
	if err != nil {
		return nil, 0, err
	}
	return d, binary.BigEndian.Uint32(data[4:8]), nil
}
