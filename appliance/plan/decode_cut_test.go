package plan

// Decode's messages for a plan file that is not there in full.
//
// Found and written by review (helper-94).

import (
	"bytes"
	"strings"
	"testing"
)

// TestDecodeNotWholeSaysMakeItAgain: a plan file that holds no plan
// says so, without the "plan file: " prefix its caller adds. Empty, cut
// and whitespace held; a file of NUL bytes (what a crash leaves of a
// file whose size reached the disk before its data, as XFS and ext4
// without auto_da_alloc do to a plan an older sosappliance saved
// without fsync) was the finding: it gave "invalid character '\x00'
// looking for beginning of value".
func TestDecodeNotWholeSaysMakeItAgain(t *testing.T) {
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"whitespace", []byte(" \n")},
		{"cut", []byte(`{"format_version": 2, "oper`)},
		{"NUL bytes", bytes.Repeat([]byte{0}, 512)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode(tc.data)
			if err == nil {
				t.Fatal("decoded")
			}
			if strings.HasPrefix(err.Error(), "plan file") {
				t.Errorf("%q: the caller prefixes the file's name", err)
			}
			if !strings.Contains(err.Error(), "make the plan again") {
				t.Errorf("%q: does not say the plan is not there and to make it again", err)
			}
		})
	}
}
