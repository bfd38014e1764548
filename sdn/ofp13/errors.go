package ofp13

import (
	"errors"
	"fmt"
)

// Kinds of malformed input, matched with errors.Is on a *DecodeError.
var (
	// ErrTruncated: the input ends before a structure it announces.
	ErrTruncated = errors.New("truncated")
	// ErrBadLength: a length field is too small, too large or misaligned.
	ErrBadLength = errors.New("bad length field")
	// ErrBadVersion: the header carries a version other than 0x04 on a
	// message that is only defined for OpenFlow 1.3.
	ErrBadVersion = errors.New("unsupported OpenFlow version")
	// ErrWrongType: UnmarshalBinary of one message struct was given
	// another message type.
	ErrWrongType = errors.New("wrong message type")
	// ErrBadMatchType: a match that is not OFPMT_OXM.
	ErrBadMatchType = errors.New("match type is not OXM")
	// ErrBadOXM: an OXM field whose length does not fit its field.
	ErrBadOXM = errors.New("bad OXM field")
	// ErrTrailingData: bytes left over after the last structure.
	ErrTrailingData = errors.New("trailing data")
)

// DecodeError reports malformed input.
type DecodeError struct {
	// What is the structure being decoded, e.g. "flow_mod.match".
	What string
	// Offset is where, counted from the start of the message.
	Offset int
	// Err is one of the Err* kinds above.
	Err error
	// Detail says what was found, when there is more to say.
	Detail string
}

func (e *DecodeError) Error() string {
	s := fmt.Sprintf("ofp13: %s at offset %d: %v", e.What, e.Offset, e.Err)
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

func (e *DecodeError) Unwrap() error { return e.Err }

// ErrEncode is the kind of every encoding error: a value that does not fit
// the wire format (a string too long for its field, a message over 64 KiB,
// an OXM value of the wrong size).
var ErrEncode = errors.New("ofp13: cannot encode")

func encodeErrorf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrEncode, fmt.Sprintf(format, args...))
}
