package ofp13_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"

	"github.com/sosappliance/sosappliance/sdn/ofp13"
)

func addSeeds(f *testing.F, add func(raw []byte)) {
	for _, m := range sampleMessages() {
		raw, err := m.MarshalBinary()
		if err != nil {
			f.Fatal(err)
		}
		add(raw)
	}
	files := loadGoldensF(f)
	for _, raw := range files {
		if len(raw) <= 8192 {
			add(raw)
		}
	}
}

// checkReencode is the property every fuzz target holds: a decoded message
// encodes, and the encoding decodes to the same message and encodes to the
// same bytes again. A refused input is refused with a *DecodeError.
func checkReencode(t *testing.T, raw []byte) {
	m, err := ofp13.Unmarshal(raw)
	if err != nil {
		var de *ofp13.DecodeError
		if !errors.As(err, &de) {
			t.Fatalf("error %v (%T) is not a *DecodeError", err, err)
		}
		if m != nil {
			t.Fatalf("error %v came with a message %T", err, m)
		}
		return
	}
	enc, err := m.MarshalBinary()
	if err != nil {
		t.Fatalf("decoded %T does not encode: %v", m, err)
	}
	if len(enc) != len(raw) {
		t.Fatalf("%T re-encodes to %d bytes from %d", m, len(enc), len(raw))
	}
	m2, err := ofp13.Unmarshal(enc)
	if err != nil {
		t.Fatalf("re-encoded %T does not decode: %v", m, err)
	}
	if !reflect.DeepEqual(m, m2) {
		t.Fatalf("re-decoded %T differs:\n%#v\n%#v", m, m, m2)
	}
	enc2, err := m2.MarshalBinary()
	if err != nil || !bytes.Equal(enc, enc2) {
		t.Fatalf("second encoding of %T differs: %v", m, err)
	}
}

// FuzzUnmarshal feeds whole messages, header included.
func FuzzUnmarshal(f *testing.F) {
	addSeeds(f, func(raw []byte) { f.Add(raw) })
	f.Fuzz(checkReencode)
}

// FuzzMessageBody keeps the header valid (version, type, length) so the
// fuzzer spends its time inside bodies: matches, instructions, actions,
// multipart entries.
func FuzzMessageBody(f *testing.F) {
	addSeeds(f, func(raw []byte) { f.Add(raw[1], raw[8:]) })
	f.Fuzz(func(t *testing.T, typ byte, body []byte) {
		if len(body) > ofp13.MaxMessageLen-ofp13.HeaderLen {
			return
		}
		raw := make([]byte, ofp13.HeaderLen, ofp13.HeaderLen+len(body))
		raw[0], raw[1] = ofp13.Version, typ
		binary.BigEndian.PutUint16(raw[2:], uint16(ofp13.HeaderLen+len(body)))
		binary.BigEndian.PutUint32(raw[4:], 1)
		checkReencode(t, append(raw, body...))
	})
}

func loadGoldensF(f *testing.F) [][]byte {
	var out [][]byte
	for _, g := range loadGoldensTB(f) {
		out = append(out, g.raw)
	}
	return out
}
