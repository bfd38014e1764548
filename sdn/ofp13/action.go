package ofp13

import "fmt"

// Action types this package models.
const (
	ActionTypeOutput   uint16 = 0
	ActionTypePushVLAN uint16 = 17
	ActionTypePopVLAN  uint16 = 18
	ActionTypeGroup    uint16 = 22
	ActionTypeSetField uint16 = 25
)

// Reserved port numbers (ofp_port_no).
const (
	PortMax        uint32 = 0xffffff00
	PortInPort     uint32 = 0xfffffff8
	PortTable      uint32 = 0xfffffff9
	PortNormal     uint32 = 0xfffffffa
	PortFlood      uint32 = 0xfffffffb
	PortAll        uint32 = 0xfffffffc
	PortController uint32 = 0xfffffffd
	PortLocal      uint32 = 0xfffffffe
	PortAny        uint32 = 0xffffffff
)

// GroupAny is the wildcard group (OFPG_ANY).
const GroupAny uint32 = 0xffffffff

// ControllerMaxLenNoBuffer asks the switch to send whole packets to the
// controller instead of buffering them.
const ControllerMaxLenNoBuffer uint16 = 0xffff

// Action is one action of an action list. The concrete types are
// *ActionOutput, *ActionGroup, *ActionPushVLAN, *ActionPopVLAN,
// *ActionSetField and *ActionRaw.
type Action interface {
	ActionType() uint16
	// String is the action as ovs-ofctl prints it.
	String() string
	appendTo(b []byte) ([]byte, error)
}

// ActionOutput sends the packet to a port, reserved ports included.
type ActionOutput struct {
	Port uint32
	// MaxLen is how much of the packet to send when Port is
	// PortController; ignored otherwise.
	MaxLen uint16
}

func (a *ActionOutput) ActionType() uint16 { return ActionTypeOutput }
func (a *ActionOutput) appendTo(b []byte) ([]byte, error) {
	b = appendU16(b, ActionTypeOutput)
	b = appendU16(b, 16)
	b = appendU32(b, a.Port)
	b = appendU16(b, a.MaxLen)
	return appendZeros(b, 6), nil
}

// ActionGroup hands the packet to a group.
type ActionGroup struct{ GroupID uint32 }

func (a *ActionGroup) ActionType() uint16 { return ActionTypeGroup }
func (a *ActionGroup) appendTo(b []byte) ([]byte, error) {
	b = appendU16(b, ActionTypeGroup)
	b = appendU16(b, 8)
	return appendU32(b, a.GroupID), nil
}

// ActionPushVLAN pushes a VLAN tag with the given TPID (0x8100 or 0x88a8).
type ActionPushVLAN struct{ EtherType uint16 }

func (a *ActionPushVLAN) ActionType() uint16 { return ActionTypePushVLAN }
func (a *ActionPushVLAN) appendTo(b []byte) ([]byte, error) {
	b = appendU16(b, ActionTypePushVLAN)
	b = appendU16(b, 8)
	b = appendU16(b, a.EtherType)
	return appendZeros(b, 2), nil
}

// ActionPopVLAN removes the outer VLAN tag.
type ActionPopVLAN struct{}

func (a *ActionPopVLAN) ActionType() uint16 { return ActionTypePopVLAN }
func (a *ActionPopVLAN) appendTo(b []byte) ([]byte, error) {
	b = appendU16(b, ActionTypePopVLAN)
	b = appendU16(b, 8)
	return appendZeros(b, 4), nil
}

// ActionSetField rewrites one header field to Field's value.
type ActionSetField struct{ Field OXM }

func (a *ActionSetField) ActionType() uint16 { return ActionTypeSetField }
func (a *ActionSetField) appendTo(b []byte) ([]byte, error) {
	n := 4 + a.Field.encodedLen()
	n += pad8(n)
	if n > 0xffff {
		return b, encodeErrorf("set_field of %d bytes", n)
	}
	start := len(b)
	b = appendU16(b, ActionTypeSetField)
	b = appendU16(b, uint16(n))
	b, err := a.Field.appendTo(b)
	if err != nil {
		return b[:start], err
	}
	return appendZeros(b, n-(len(b)-start)), nil
}

// ActionRaw is an action this package does not model, kept as type and
// body (everything after the 4-byte type/length header, padding included).
type ActionRaw struct {
	Type uint16
	Body []byte
}

func (a *ActionRaw) ActionType() uint16 { return a.Type }
func (a *ActionRaw) appendTo(b []byte) ([]byte, error) {
	n := 4 + len(a.Body)
	if n%8 != 0 || n > 0xffff {
		return b, encodeErrorf("raw action of %d bytes is not a multiple of 8 up to 65535", n)
	}
	b = appendU16(b, a.Type)
	b = appendU16(b, uint16(n))
	return append(b, a.Body...), nil
}

func appendActions(b []byte, actions []Action) ([]byte, error) {
	return appendList(b, actions, "action")
}

// decodeActions decodes an action list that fills d.
func decodeActions(d *decoder) []Action {
	return decodeList(d, "action", decodeAction)
}

// appendList appends the encodings of items (actions or instructions),
// leaving b as it was on error.
func appendList[T interface {
	appendTo([]byte) ([]byte, error)
}](b []byte, items []T, what string) ([]byte, error) {
	start := len(b)
	for _, it := range items {
		if any(it) == nil {
			return b[:start], encodeErrorf("nil %s", what)
		}
		var err error
		if b, err = it.appendTo(b); err != nil {
			return b[:start], err
		}
	}
	return b, nil
}

// decodeList decodes a list of type-length-value items (actions or
// instructions: 16-bit type, 16-bit length that counts the header and is a
// multiple of 8) that fills d.
func decodeList[T any](d *decoder, what string, decodeOne func(uint16, *decoder) T) []T {
	var out []T
	for d.remaining() > 0 && d.err == nil {
		typ := d.u16()
		n := int(d.u16())
		if d.err != nil {
			break
		}
		if n < 8 || n%8 != 0 {
			d.off -= 2
			d.fail(ErrBadLength, "%s type %d with length %d", what, typ, n)
			break
		}
		body := d.sub(n-4, fmt.Sprintf("%s %d", what, typ))
		out = append(out, decodeOne(typ, body))
		d.adopt(body)
	}
	return out
}

func decodeAction(typ uint16, d *decoder) Action {
	var a Action
	switch typ {
	case ActionTypeOutput:
		o := &ActionOutput{Port: d.u32(), MaxLen: d.u16()}
		d.skip(6)
		a = o
	case ActionTypeGroup:
		a = &ActionGroup{GroupID: d.u32()}
	case ActionTypePushVLAN:
		p := &ActionPushVLAN{EtherType: d.u16()}
		d.skip(2)
		a = p
	case ActionTypePopVLAN:
		d.skip(4)
		a = &ActionPopVLAN{}
	case ActionTypeSetField:
		f := decodeOXM(d)
		// What is left is padding to 8 bytes.
		if d.remaining() >= 8 {
			d.fail(ErrBadLength, "set_field carries %d bytes after its field", d.remaining())
		}
		d.skip(d.remaining())
		a = &ActionSetField{Field: f}
	default:
		return &ActionRaw{Type: typ, Body: d.rest()}
	}
	d.end()
	return a
}
