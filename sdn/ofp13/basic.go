package ofp13

import (
	"fmt"
)

// Hello element types.
const HelloElemVersionBitmap uint16 = 1

// HelloElement is one element of a HELLO, kept as type and body.
type HelloElement struct {
	Type uint16
	Body []byte
}

// Hello opens version negotiation. Version is the header version: the
// highest version the sender speaks, which may differ from 0x04.
type Hello struct {
	Version  uint8
	XID      uint32
	Elements []HelloElement
}

// NewHello returns a HELLO that offers exactly the given versions with a
// version bitmap.
func NewHello(versions ...uint8) *Hello {
	var words []uint32
	highest := uint8(0)
	for _, v := range versions {
		for len(words) <= int(v)/32 {
			words = append(words, 0)
		}
		words[v/32] |= 1 << (v % 32)
		highest = max(highest, v)
	}
	body := make([]byte, 0, 4*len(words))
	for _, w := range words {
		body = appendU32(body, w)
	}
	return &Hello{Version: highest, Elements: []HelloElement{{Type: HelloElemVersionBitmap, Body: body}}}
}

// Versions is the set of versions the sender offers: its version bitmap, or
// every version up to the header version when it sends none (OpenFlow 1.0
// to 1.3.0 style negotiation).
func (m *Hello) Versions() []uint8 {
	for _, e := range m.Elements {
		if e.Type != HelloElemVersionBitmap {
			continue
		}
		var vs []uint8
		d := newDecoder(e.Body, 0, "hello bitmap")
		for w := 0; d.remaining() >= 4 && w < 8; w++ {
			word := d.u32()
			for bit := range 32 {
				if word&(1<<bit) != 0 {
					vs = append(vs, uint8(w*32+bit))
				}
			}
		}
		return vs
	}
	vs := make([]uint8, 0, m.Version)
	for v := uint8(1); v <= m.Version && v != 0; v++ {
		vs = append(vs, v)
	}
	return vs
}

// Supports reports whether the sender of the HELLO offers version v.
func (m *Hello) Supports(v uint8) bool {
	for _, x := range m.Versions() {
		if x == v {
			return true
		}
	}
	return false
}

func (m *Hello) MessageType() Type              { return TypeHello }
func (m *Hello) TransactionID() uint32          { return m.XID }
func (m *Hello) SetTransactionID(xid uint32)    { m.XID = xid }
func (m *Hello) MarshalBinary() ([]byte, error) { return m.AppendBinary(nil) }

func (m *Hello) AppendBinary(b []byte) ([]byte, error) {
	start := len(b)
	version := m.Version
	if version == 0 {
		version = Version
	}
	b = appendHeader(b, version, TypeHello, m.XID)
	for _, e := range m.Elements {
		n := 4 + len(e.Body)
		if n > 0xffff {
			return b[:start], encodeErrorf("hello element of %d bytes", n)
		}
		b = appendU16(b, e.Type)
		b = appendU16(b, uint16(n))
		b = append(b, e.Body...)
		b = appendZeros(b, pad8(n))
	}
	return finishMessage(b, start)
}

func (m *Hello) UnmarshalBinary(data []byte) error {
	h, err := ParseHeader(data)
	if err != nil {
		return err
	}
	d, err := openBody(data, TypeHello, h.Version)
	if err != nil {
		return err
	}
	*m = Hello{Version: h.Version, XID: h.XID}
	for d.remaining() > 0 && d.err == nil {
		typ := d.u16()
		n := int(d.u16())
		if d.err != nil {
			break
		}
		if n < 4 {
			d.off -= 2
			d.fail(ErrBadLength, "hello element length %d", n)
			break
		}
		body := d.bytes(n - 4)
		d.skip(pad8(n))
		m.Elements = append(m.Elements, HelloElement{Type: typ, Body: body})
	}
	return d.err
}

// ErrorType is the type of an OFPT_ERROR (ofp_error_type).
type ErrorType uint16

// Error types of OpenFlow 1.3.
const (
	ErrorTypeHelloFailed         ErrorType = 0
	ErrorTypeBadRequest          ErrorType = 1
	ErrorTypeBadAction           ErrorType = 2
	ErrorTypeBadInstruction      ErrorType = 3
	ErrorTypeBadMatch            ErrorType = 4
	ErrorTypeFlowModFailed       ErrorType = 5
	ErrorTypeGroupModFailed      ErrorType = 6
	ErrorTypePortModFailed       ErrorType = 7
	ErrorTypeTableModFailed      ErrorType = 8
	ErrorTypeQueueOpFailed       ErrorType = 9
	ErrorTypeSwitchConfigFailed  ErrorType = 10
	ErrorTypeRoleRequestFailed   ErrorType = 11
	ErrorTypeMeterModFailed      ErrorType = 12
	ErrorTypeTableFeaturesFailed ErrorType = 13
	ErrorTypeExperimenter        ErrorType = 0xffff
)

// Codes the controller acts on.
const (
	HelloFailedIncompatible uint16 = 0
	FlowModFailedTableFull  uint16 = 1
)

var errorTypeNames = map[ErrorType]string{
	0: "OFPET_HELLO_FAILED", 1: "OFPET_BAD_REQUEST", 2: "OFPET_BAD_ACTION", 3: "OFPET_BAD_INSTRUCTION",
	4: "OFPET_BAD_MATCH", 5: "OFPET_FLOW_MOD_FAILED", 6: "OFPET_GROUP_MOD_FAILED", 7: "OFPET_PORT_MOD_FAILED",
	8: "OFPET_TABLE_MOD_FAILED", 9: "OFPET_QUEUE_OP_FAILED", 10: "OFPET_SWITCH_CONFIG_FAILED",
	11: "OFPET_ROLE_REQUEST_FAILED", 12: "OFPET_METER_MOD_FAILED", 13: "OFPET_TABLE_FEATURES_FAILED",
	0xffff: "OFPET_EXPERIMENTER",
}

func (t ErrorType) String() string {
	if s, ok := errorTypeNames[t]; ok {
		return s
	}
	return fmt.Sprintf("OFPET_%d", uint16(t))
}

// errorCodeNames names the codes of the types a controller of flows meets.
var errorCodeNames = map[ErrorType][]string{
	ErrorTypeHelloFailed: {"OFPHFC_INCOMPATIBLE", "OFPHFC_EPERM"},
	ErrorTypeBadRequest: {"OFPBRC_BAD_VERSION", "OFPBRC_BAD_TYPE", "OFPBRC_BAD_MULTIPART", "OFPBRC_BAD_EXPERIMENTER",
		"OFPBRC_BAD_EXP_TYPE", "OFPBRC_EPERM", "OFPBRC_BAD_LEN", "OFPBRC_BUFFER_EMPTY", "OFPBRC_BUFFER_UNKNOWN",
		"OFPBRC_BAD_TABLE_ID", "OFPBRC_IS_SLAVE", "OFPBRC_BAD_PORT", "OFPBRC_BAD_PACKET", "OFPBRC_MULTIPART_BUFFER_OVERFLOW"},
	ErrorTypeBadAction: {"OFPBAC_BAD_TYPE", "OFPBAC_BAD_LEN", "OFPBAC_BAD_EXPERIMENTER", "OFPBAC_BAD_EXP_TYPE",
		"OFPBAC_BAD_OUT_PORT", "OFPBAC_BAD_ARGUMENT", "OFPBAC_EPERM", "OFPBAC_TOO_MANY", "OFPBAC_BAD_QUEUE",
		"OFPBAC_BAD_OUT_GROUP", "OFPBAC_MATCH_INCONSISTENT", "OFPBAC_UNSUPPORTED_ORDER", "OFPBAC_BAD_TAG",
		"OFPBAC_BAD_SET_TYPE", "OFPBAC_BAD_SET_LEN", "OFPBAC_BAD_SET_ARGUMENT"},
	ErrorTypeBadInstruction: {"OFPBIC_UNKNOWN_INST", "OFPBIC_UNSUP_INST", "OFPBIC_BAD_TABLE_ID", "OFPBIC_UNSUP_METADATA",
		"OFPBIC_UNSUP_METADATA_MASK", "OFPBIC_BAD_EXPERIMENTER", "OFPBIC_BAD_EXP_TYPE", "OFPBIC_BAD_LEN", "OFPBIC_EPERM"},
	ErrorTypeBadMatch: {"OFPBMC_BAD_TYPE", "OFPBMC_BAD_LEN", "OFPBMC_BAD_TAG", "OFPBMC_BAD_DL_ADDR_MASK",
		"OFPBMC_BAD_NW_ADDR_MASK", "OFPBMC_BAD_WILDCARDS", "OFPBMC_BAD_FIELD", "OFPBMC_BAD_VALUE", "OFPBMC_BAD_MASK",
		"OFPBMC_BAD_PREREQ", "OFPBMC_DUP_FIELD", "OFPBMC_EPERM"},
	ErrorTypeFlowModFailed: {"OFPFMFC_UNKNOWN", "OFPFMFC_TABLE_FULL", "OFPFMFC_BAD_TABLE_ID", "OFPFMFC_OVERLAP",
		"OFPFMFC_EPERM", "OFPFMFC_BAD_TIMEOUT", "OFPFMFC_BAD_COMMAND", "OFPFMFC_BAD_FLAGS"},
}

// Error is an OFPT_ERROR. It is also a Go error, so a switch's refusal can
// travel up as one.
type Error struct {
	// Version is the header version: an error about version negotiation
	// may carry the peer's own version.
	Version uint8
	XID     uint32
	Type    ErrorType
	Code    uint16
	// Experimenter is set when Type is ErrorTypeExperimenter (Code is then
	// the experimenter's exp_type).
	Experimenter uint32
	// Data holds at least the first 64 bytes of the offending request, or
	// text for HELLO_FAILED.
	Data []byte
}

// CodeName is the name of the code, such as "OFPFMFC_TABLE_FULL".
func (m *Error) CodeName() string {
	if names, ok := errorCodeNames[m.Type]; ok && int(m.Code) < len(names) {
		return names[m.Code]
	}
	return fmt.Sprintf("code %d", m.Code)
}

func (m *Error) Error() string {
	return fmt.Sprintf("switch error %s/%s", m.Type, m.CodeName())
}

func (m *Error) MessageType() Type              { return TypeError }
func (m *Error) TransactionID() uint32          { return m.XID }
func (m *Error) SetTransactionID(xid uint32)    { m.XID = xid }
func (m *Error) MarshalBinary() ([]byte, error) { return m.AppendBinary(nil) }

func (m *Error) AppendBinary(b []byte) ([]byte, error) {
	start := len(b)
	version := m.Version
	if version == 0 {
		version = Version
	}
	b = appendHeader(b, version, TypeError, m.XID)
	b = appendU16(b, uint16(m.Type))
	b = appendU16(b, m.Code)
	if m.Type == ErrorTypeExperimenter {
		b = appendU32(b, m.Experimenter)
	}
	b = append(b, m.Data...)
	return finishMessage(b, start)
}

func (m *Error) UnmarshalBinary(data []byte) error {
	h, err := ParseHeader(data)
	if err != nil {
		return err
	}
	d, err := openBody(data, TypeError, h.Version)
	if err != nil {
		return err
	}
	*m = Error{Version: h.Version, XID: h.XID, Type: ErrorType(d.u16()), Code: d.u16()}
	if m.Type == ErrorTypeExperimenter {
		m.Experimenter = d.u32()
	}
	m.Data = d.rest()
	return d.err
}

// EchoRequest asks the peer to prove it is alive; Data comes back verbatim.
type EchoRequest struct {
	XID  uint32
	Data []byte
}

func (m *EchoRequest) MessageType() Type              { return TypeEchoRequest }
func (m *EchoRequest) TransactionID() uint32          { return m.XID }
func (m *EchoRequest) SetTransactionID(xid uint32)    { m.XID = xid }
func (m *EchoRequest) MarshalBinary() ([]byte, error) { return m.AppendBinary(nil) }
func (m *EchoRequest) AppendBinary(b []byte) ([]byte, error) {
	return appendWithBody(b, TypeEchoRequest, m.XID, m.Data)
}
func (m *EchoRequest) UnmarshalBinary(data []byte) error {
	xid, body, err := unmarshalWithBody(data, TypeEchoRequest)
	*m = EchoRequest{XID: xid, Data: body}
	return err
}

// EchoReply answers an EchoRequest with its xid and data.
type EchoReply struct {
	XID  uint32
	Data []byte
}

func (m *EchoReply) MessageType() Type              { return TypeEchoReply }
func (m *EchoReply) TransactionID() uint32          { return m.XID }
func (m *EchoReply) SetTransactionID(xid uint32)    { m.XID = xid }
func (m *EchoReply) MarshalBinary() ([]byte, error) { return m.AppendBinary(nil) }
func (m *EchoReply) AppendBinary(b []byte) ([]byte, error) {
	return appendWithBody(b, TypeEchoReply, m.XID, m.Data)
}
func (m *EchoReply) UnmarshalBinary(data []byte) error {
	xid, body, err := unmarshalWithBody(data, TypeEchoReply)
	*m = EchoReply{XID: xid, Data: body}
	return err
}

// FeaturesRequest asks the switch for its datapath id and capabilities.
type FeaturesRequest struct{ XID uint32 }

func (m *FeaturesRequest) MessageType() Type              { return TypeFeaturesRequest }
func (m *FeaturesRequest) TransactionID() uint32          { return m.XID }
func (m *FeaturesRequest) SetTransactionID(xid uint32)    { m.XID = xid }
func (m *FeaturesRequest) MarshalBinary() ([]byte, error) { return m.AppendBinary(nil) }
func (m *FeaturesRequest) AppendBinary(b []byte) ([]byte, error) {
	return appendWithBody(b, TypeFeaturesRequest, m.XID, nil)
}
func (m *FeaturesRequest) UnmarshalBinary(data []byte) error {
	xid, err := unmarshalEmpty(data, TypeFeaturesRequest)
	*m = FeaturesRequest{XID: xid}
	return err
}

// Capabilities bits of a FeaturesReply.
const (
	CapFlowStats   uint32 = 1 << 0
	CapTableStats  uint32 = 1 << 1
	CapPortStats   uint32 = 1 << 2
	CapGroupStats  uint32 = 1 << 3
	CapIPReasm     uint32 = 1 << 5
	CapQueueStats  uint32 = 1 << 6
	CapPortBlocked uint32 = 1 << 8
)

// FeaturesReply identifies the switch.
type FeaturesReply struct {
	XID          uint32
	DatapathID   uint64
	NBuffers     uint32
	NTables      uint8
	AuxiliaryID  uint8
	Capabilities uint32
	Reserved     uint32
}

func (m *FeaturesReply) MessageType() Type              { return TypeFeaturesReply }
func (m *FeaturesReply) TransactionID() uint32          { return m.XID }
func (m *FeaturesReply) SetTransactionID(xid uint32)    { m.XID = xid }
func (m *FeaturesReply) MarshalBinary() ([]byte, error) { return m.AppendBinary(nil) }

func (m *FeaturesReply) AppendBinary(b []byte) ([]byte, error) {
	start := len(b)
	b = appendHeader(b, Version, TypeFeaturesReply, m.XID)
	b = appendU64(b, m.DatapathID)
	b = appendU32(b, m.NBuffers)
	b = append(b, m.NTables, m.AuxiliaryID, 0, 0)
	b = appendU32(b, m.Capabilities)
	b = appendU32(b, m.Reserved)
	return finishMessage(b, start)
}

func (m *FeaturesReply) UnmarshalBinary(data []byte) error {
	d, xid, err := open13(data, TypeFeaturesReply)
	if err != nil {
		return err
	}
	*m = FeaturesReply{XID: xid, DatapathID: d.u64(), NBuffers: d.u32(), NTables: d.u8(), AuxiliaryID: d.u8()}
	d.skip(2)
	m.Capabilities = d.u32()
	m.Reserved = d.u32()
	d.end()
	return d.err
}

// Switch configuration flags (ofp_config_flags).
const (
	ConfigFragNormal uint16 = 0
	ConfigFragDrop   uint16 = 1
	ConfigFragReasm  uint16 = 2
)

// GetConfigRequest asks for the switch configuration.
type GetConfigRequest struct{ XID uint32 }

func (m *GetConfigRequest) MessageType() Type              { return TypeGetConfigRequest }
func (m *GetConfigRequest) TransactionID() uint32          { return m.XID }
func (m *GetConfigRequest) SetTransactionID(xid uint32)    { m.XID = xid }
func (m *GetConfigRequest) MarshalBinary() ([]byte, error) { return m.AppendBinary(nil) }
func (m *GetConfigRequest) AppendBinary(b []byte) ([]byte, error) {
	return appendWithBody(b, TypeGetConfigRequest, m.XID, nil)
}
func (m *GetConfigRequest) UnmarshalBinary(data []byte) error {
	xid, err := unmarshalEmpty(data, TypeGetConfigRequest)
	*m = GetConfigRequest{XID: xid}
	return err
}

// SwitchConfig is the body of GET_CONFIG_REPLY and SET_CONFIG.
type SwitchConfig struct {
	Flags       uint16
	MissSendLen uint16
}

func (c SwitchConfig) appendTo(b []byte, t Type, xid uint32) ([]byte, error) {
	start := len(b)
	b = appendHeader(b, Version, t, xid)
	b = appendU16(b, c.Flags)
	b = appendU16(b, c.MissSendLen)
	return finishMessage(b, start)
}

func decodeSwitchConfig(data []byte, t Type) (uint32, SwitchConfig, error) {
	d, xid, err := open13(data, t)
	if err != nil {
		return 0, SwitchConfig{}, err
	}
	c := SwitchConfig{Flags: d.u16(), MissSendLen: d.u16()}
	d.end()
	return xid, c, d.err
}

// GetConfigReply carries the switch configuration.
type GetConfigReply struct {
	XID uint32
	SwitchConfig
}

func (m *GetConfigReply) MessageType() Type              { return TypeGetConfigReply }
func (m *GetConfigReply) TransactionID() uint32          { return m.XID }
func (m *GetConfigReply) SetTransactionID(xid uint32)    { m.XID = xid }
func (m *GetConfigReply) MarshalBinary() ([]byte, error) { return m.AppendBinary(nil) }
func (m *GetConfigReply) AppendBinary(b []byte) ([]byte, error) {
	return m.SwitchConfig.appendTo(b, TypeGetConfigReply, m.XID)
}
func (m *GetConfigReply) UnmarshalBinary(data []byte) error {
	xid, c, err := decodeSwitchConfig(data, TypeGetConfigReply)
	*m = GetConfigReply{XID: xid, SwitchConfig: c}
	return err
}

// SetConfig sets the switch configuration.
type SetConfig struct {
	XID uint32
	SwitchConfig
}

func (m *SetConfig) MessageType() Type              { return TypeSetConfig }
func (m *SetConfig) TransactionID() uint32          { return m.XID }
func (m *SetConfig) SetTransactionID(xid uint32)    { m.XID = xid }
func (m *SetConfig) MarshalBinary() ([]byte, error) { return m.AppendBinary(nil) }
func (m *SetConfig) AppendBinary(b []byte) ([]byte, error) {
	return m.SwitchConfig.appendTo(b, TypeSetConfig, m.XID)
}
func (m *SetConfig) UnmarshalBinary(data []byte) error {
	xid, c, err := decodeSwitchConfig(data, TypeSetConfig)
	*m = SetConfig{XID: xid, SwitchConfig: c}
	return err
}

// BarrierRequest asks the switch to finish every earlier message first; its
// reply proves that they all took effect (or produced their errors).
type BarrierRequest struct{ XID uint32 }

func (m *BarrierRequest) MessageType() Type              { return TypeBarrierRequest }
func (m *BarrierRequest) TransactionID() uint32          { return m.XID }
func (m *BarrierRequest) SetTransactionID(xid uint32)    { m.XID = xid }
func (m *BarrierRequest) MarshalBinary() ([]byte, error) { return m.AppendBinary(nil) }
func (m *BarrierRequest) AppendBinary(b []byte) ([]byte, error) {
	return appendWithBody(b, TypeBarrierRequest, m.XID, nil)
}
func (m *BarrierRequest) UnmarshalBinary(data []byte) error {
	xid, err := unmarshalEmpty(data, TypeBarrierRequest)
	*m = BarrierRequest{XID: xid}
	return err
}

// BarrierReply answers a BarrierRequest.
type BarrierReply struct{ XID uint32 }

func (m *BarrierReply) MessageType() Type              { return TypeBarrierReply }
func (m *BarrierReply) TransactionID() uint32          { return m.XID }
func (m *BarrierReply) SetTransactionID(xid uint32)    { m.XID = xid }
func (m *BarrierReply) MarshalBinary() ([]byte, error) { return m.AppendBinary(nil) }
func (m *BarrierReply) AppendBinary(b []byte) ([]byte, error) {
	return appendWithBody(b, TypeBarrierReply, m.XID, nil)
}
func (m *BarrierReply) UnmarshalBinary(data []byte) error {
	xid, err := unmarshalEmpty(data, TypeBarrierReply)
	*m = BarrierReply{XID: xid}
	return err
}

func appendWithBody(b []byte, t Type, xid uint32, body []byte) ([]byte, error) {
	start := len(b)
	b = appendHeader(b, Version, t, xid)
	b = append(b, body...)
	return finishMessage(b, start)
}

func unmarshalWithBody(data []byte, t Type) (uint32, []byte, error) {
	d, xid, err := open13(data, t)
	if err != nil {
		return 0, nil, err
	}
	return xid, d.rest(), d.err
}

func unmarshalEmpty(data []byte, t Type) (uint32, error) {
	d, xid, err := open13(data, t)
	if err != nil {
		return 0, err
	}
	d.end()
	return xid, d.err
}
