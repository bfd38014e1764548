package sdn

import (
	"encoding/binary"
	"runtime"
	"testing"

	"github.com/sosappliance/sosappliance/sdn/ofp13"
)

// r73Part is one FLOW multipart reply part (under 64 KiB) of
// entries whose match holds fields empty OXM fields of an unassigned
// class (4 bytes each on the wire), no instructions.
func r73Part(xid uint32, fields int) []byte {
	matchLen := 4 + 4*fields
	entryLen := 48 + matchLen + (8-matchLen%8)%8
	b := []byte{ofp13.Version, byte(ofp13.TypeMultipartReply), 0, 0}
	b = binary.BigEndian.AppendUint32(b, xid)
	b = binary.BigEndian.AppendUint16(b, uint16(ofp13.MultipartFlow))
	b = binary.BigEndian.AppendUint16(b, ofp13.MultipartMore)
	b = append(b, 0, 0, 0, 0)
	for len(b)+entryLen <= 65535 {
		e := binary.BigEndian.AppendUint16(nil, uint16(entryLen))
		e = append(e, make([]byte, 46)...)
		e = binary.BigEndian.AppendUint16(e, ofp13.MatchTypeOXM)
		e = binary.BigEndian.AppendUint16(e, uint16(matchLen))
		for range fields {
			e = append(e, 0x00, 0x01, 0x00, 0x00)
		}
		e = append(e, make([]byte, entryLen-len(e))...)
		b = append(b, e...)
	}
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	return b
}

// TestReplyCostCountsWhatADumpHolds: dispatch charges a flow dump
// part size+replyCost against FlowReplyLimit, whose comment says the
// bytes "count what the entries take decoded" and so bound the heap a
// dump holds. replyCost counts len(st.Match.Fields) OXMs, but the decoder
// grows Fields by append: 293 fields take a backing array of 585. The
// heap a dump holds is then about twice what the limit counts (the wire
// bytes it counts are not even kept: the decoder copies).
// Found by review (helper-73): before replyCost counted capacities, a
// crafted dump held 1.86 times what it counted.
func TestReplyCostCountsWhatADumpHolds(t *testing.T) {
	const parts = 30
	raw := make([][]byte, parts)
	for i := range raw {
		raw[i] = r73Part(uint32(100+i), 293)
	}
	kept := make([]ofp13.Message, parts)
	counted := 0
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i, b := range raw {
		m, err := ofp13.Unmarshal(b)
		if err != nil {
			t.Fatal(err)
		}
		kept[i] = m
		counted += len(b) + replyCost(m)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	held := int(after.HeapAlloc) - int(before.HeapAlloc)
	runtime.KeepAlive(kept)
	runtime.KeepAlive(raw)
	entries := len(kept[0].(*ofp13.FlowStatsReply).Stats) * parts
	t.Logf("%d parts, %d entries: counted %.1f MiB (size+replyCost), held decoded %.1f MiB (%.2fx)",
		parts, entries, float64(counted)/(1<<20), float64(held)/(1<<20), float64(held)/float64(counted))
	if held > counted*5/4 {
		t.Errorf("a dump counted as %d bytes against FlowReplyLimit holds %d bytes decoded: the limit's 2,944 bytes an entry (\"about 50 MiB of heap\") is %.2fx that in the heap",
			counted, held, float64(held)/float64(counted))
	}
}
