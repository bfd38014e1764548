package ofp13

// Instruction types this package models.
const (
	InstructionTypeGotoTable    uint16 = 1
	InstructionTypeWriteActions uint16 = 3
	InstructionTypeApplyActions uint16 = 4
	InstructionTypeClearActions uint16 = 5
)

// Instruction is one instruction of a flow entry. The concrete types are
// *GotoTable, *ApplyActions, *WriteActions, *ClearActions and
// *InstructionRaw.
type Instruction interface {
	InstructionType() uint16
	// String is the instruction as ovs-ofctl prints it.
	String() string
	appendTo(b []byte) ([]byte, error)
}

// GotoTable continues processing in another table.
type GotoTable struct{ TableID uint8 }

func (i *GotoTable) InstructionType() uint16 { return InstructionTypeGotoTable }
func (i *GotoTable) appendTo(b []byte) ([]byte, error) {
	b = appendU16(b, InstructionTypeGotoTable)
	b = appendU16(b, 8)
	b = append(b, i.TableID)
	return appendZeros(b, 3), nil
}

// ApplyActions runs actions on the packet now.
type ApplyActions struct{ Actions []Action }

func (i *ApplyActions) InstructionType() uint16 { return InstructionTypeApplyActions }
func (i *ApplyActions) appendTo(b []byte) ([]byte, error) {
	return appendActionsInstruction(b, InstructionTypeApplyActions, i.Actions)
}

// WriteActions merges actions into the action set.
type WriteActions struct{ Actions []Action }

func (i *WriteActions) InstructionType() uint16 { return InstructionTypeWriteActions }
func (i *WriteActions) appendTo(b []byte) ([]byte, error) {
	return appendActionsInstruction(b, InstructionTypeWriteActions, i.Actions)
}

// ClearActions empties the action set.
type ClearActions struct{}

func (i *ClearActions) InstructionType() uint16 { return InstructionTypeClearActions }
func (i *ClearActions) appendTo(b []byte) ([]byte, error) {
	return appendActionsInstruction(b, InstructionTypeClearActions, nil)
}

// InstructionRaw is an instruction this package does not model (meter,
// write-metadata, experimenter), kept as type and body.
type InstructionRaw struct {
	Type uint16
	Body []byte
}

func (i *InstructionRaw) InstructionType() uint16 { return i.Type }
func (i *InstructionRaw) appendTo(b []byte) ([]byte, error) {
	n := 4 + len(i.Body)
	if n%8 != 0 || n > 0xffff {
		return b, encodeErrorf("raw instruction of %d bytes is not a multiple of 8 up to 65535", n)
	}
	b = appendU16(b, i.Type)
	b = appendU16(b, uint16(n))
	return append(b, i.Body...), nil
}

func appendActionsInstruction(b []byte, typ uint16, actions []Action) ([]byte, error) {
	start := len(b)
	b = appendU16(b, typ)
	b = appendU16(b, 0)
	b = appendZeros(b, 4)
	b, err := appendActions(b, actions)
	if err != nil {
		return b[:start], err
	}
	n := len(b) - start
	if n > 0xffff {
		return b[:start], encodeErrorf("instruction of %d bytes", n)
	}
	putU16(b[start+2:], uint16(n))
	return b, nil
}

func appendInstructions(b []byte, instructions []Instruction) ([]byte, error) {
	return appendList(b, instructions, "instruction")
}

// decodeInstructions decodes an instruction list that fills d.
func decodeInstructions(d *decoder) []Instruction {
	return decodeList(d, "instruction", decodeInstruction)
}

func decodeInstruction(typ uint16, d *decoder) Instruction {
	var in Instruction
	switch typ {
	case InstructionTypeGotoTable:
		g := &GotoTable{TableID: d.u8()}
		d.skip(3)
		in = g
	case InstructionTypeApplyActions, InstructionTypeWriteActions, InstructionTypeClearActions:
		d.skip(4)
		actions := decodeActions(d)
		switch typ {
		case InstructionTypeApplyActions:
			in = &ApplyActions{Actions: actions}
		case InstructionTypeWriteActions:
			in = &WriteActions{Actions: actions}
		default:
			if len(actions) > 0 {
				d.fail(ErrTrailingData, "clear_actions carries %d actions", len(actions))
			}
			in = &ClearActions{}
		}
	default:
		return &InstructionRaw{Type: typ, Body: d.rest()}
	}
	d.end()
	return in
}

// AppendInstructions encodes an instruction list; two lists do the same
// thing when their encodings are equal.
func AppendInstructions(b []byte, instructions []Instruction) ([]byte, error) {
	return appendInstructions(b, instructions)
}
