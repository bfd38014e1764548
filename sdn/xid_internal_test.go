package sdn

import (
	"math"
	"testing"
)

// Transaction ids wrap past 2^32 to 16, skipping 0 and the handshake's, and
// never reuse one a request still waits on, whether a request or a plain
// send takes it (found by review: send did not wrap).
func TestTransactionIDsWrap(t *testing.T) {
	c := &SwitchConn{pending: map[uint32]*pending{17: {}}}
	c.nextXID = math.MaxUint32 - 1
	var got []uint32
	for range 3 {
		got = append(got, c.takeXIDLocked())
	}
	if want := []uint32{math.MaxUint32, 16, 18}; got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("ids %v, want %v", got, want)
	}
}
