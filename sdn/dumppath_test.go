package sdn_test

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/sosappliance/sosappliance/sdn/flows"
	"github.com/sosappliance/sosappliance/sdn/ofp13"
)

// dumpGen builds random, mostly well-formed, flow dump replies.
type dumpGen struct{ r *rand.Rand }

var basicFieldSizes = []int{4, 4, 8, 6, 6, 2, 2, 1, 1, 1, 1, 4, 4, 2, 2, 2, 2, 2, 2, 1, 1, 2, 4, 4, 6, 6, 16, 16}

func (g dumpGen) bytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		switch g.r.IntN(4) {
		case 0:
			b[i] = 0
		case 1:
			b[i] = 0xff
		default:
			b[i] = byte(g.r.Uint32())
		}
	}
	return b
}

func (g dumpGen) oxm() []byte {
	classes := []uint16{0x8000, 0x8000, 0x8000, 0xffff, 0x0001, 0x8001}
	class := classes[g.r.IntN(len(classes))]
	field := g.r.IntN(34)
	mask := g.r.IntN(3) == 0
	var payload []byte
	switch {
	case class == 0x8000 && field < len(basicFieldSizes) && g.r.IntN(8) != 0:
		payload = g.bytes(basicFieldSizes[field])
		if mask {
			payload = append(payload, g.bytes(basicFieldSizes[field])...)
		}
	case class == 0xffff:
		payload = g.bytes(4 + g.r.IntN(12))
	default:
		payload = g.bytes(g.r.IntN(20))
	}
	hm := 0
	if mask {
		hm = 1
	}
	b := binary.BigEndian.AppendUint16(nil, class)
	b = append(b, byte(field<<1|hm), byte(len(payload)))
	return append(b, payload...)
}

func (g dumpGen) match() []byte {
	var body []byte
	for range g.r.IntN(6) {
		body = append(body, g.oxm()...)
	}
	n := 4 + len(body)
	b := binary.BigEndian.AppendUint16(nil, 1)
	b = binary.BigEndian.AppendUint16(b, uint16(n))
	b = append(b, body...)
	return append(b, make([]byte, (8-n%8)%8)...)
}

func (g dumpGen) tlv(typ uint16, body []byte) []byte {
	n := 4 + len(body)
	body = append(body, make([]byte, (8-n%8)%8)...)
	b := binary.BigEndian.AppendUint16(nil, typ)
	b = binary.BigEndian.AppendUint16(b, uint16(4+len(body)))
	return append(b, body...)
}

func (g dumpGen) action() []byte {
	switch g.r.IntN(6) {
	case 0:
		return g.tlv(0, append(g.bytes(6), 0, 0, 0, 0, 0, 0))
	case 1:
		return g.tlv(22, g.bytes(4))
	case 2:
		return g.tlv(17, append(g.bytes(2), 0, 0))
	case 3:
		return g.tlv(18, make([]byte, 4))
	case 4:
		return g.tlv(25, g.oxm())
	}
	return g.tlv(uint16(g.r.IntN(40)), g.bytes(g.r.IntN(16)))
}

func (g dumpGen) instruction() []byte {
	var actions []byte
	for range g.r.IntN(4) {
		actions = append(actions, g.action()...)
	}
	switch g.r.IntN(5) {
	case 0:
		return g.tlv(1, append(g.bytes(1), 0, 0, 0))
	case 1:
		return g.tlv(3, append(make([]byte, 4), actions...))
	case 2:
		return g.tlv(4, append(make([]byte, 4), actions...))
	case 3:
		return g.tlv(5, make([]byte, 4))
	}
	return g.tlv(uint16(g.r.IntN(8)), g.bytes(g.r.IntN(12)))
}

func (g dumpGen) reply() []byte {
	var body []byte
	for range 1 + g.r.IntN(4) {
		e := []byte{0, 0, byte(g.r.IntN(256)), 0}
		e = append(e, g.bytes(16)...) // duration, priority, idle, hard, flags
		e = append(e, 0, 0, 0, 0)
		cookie := flows.CookiePrefix | uint64(g.r.Uint32())
		if g.r.IntN(4) == 0 {
			cookie = g.r.Uint64()
		}
		e = binary.BigEndian.AppendUint64(e, cookie)
		e = append(e, g.bytes(16)...)
		e = append(e, g.match()...)
		for range g.r.IntN(3) {
			e = append(e, g.instruction()...)
		}
		binary.BigEndian.PutUint16(e, uint16(len(e)))
		body = append(body, e...)
	}
	b := []byte{ofp13.Version, byte(ofp13.TypeMultipartReply), 0, 0, 0, 0, 0, 9, 0, 1, 0, 0, 0, 0, 0, 0}
	b = append(b, body...)
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	return b
}

// TestDumpPathTakesAnyDecodedFlow feeds random flow dump replies
// (valid TLV structure, random classes, fields, sizes, masks, actions and
// instructions) through what the controller does with a dump that
// decoded: FromStats, Diff against nothing and against a changed copy,
// every string the logs and status print, and the flow mods it would send.
// None may panic; the fuzz targets cover decoding only. Written by review
// (helper-53).
func TestDumpPathTakesAnyDecodedFlow(t *testing.T) {
	g := dumpGen{rand.New(rand.NewPCG(53, 53))}
	decoded, stats := 0, 0
	for range 30000 {
		raw := g.reply()
		m, err := ofp13.Unmarshal(raw)
		if err != nil {
			continue
		}
		decoded++
		fs, ok := m.(*ofp13.FlowStatsReply)
		if !ok {
			t.Fatalf("decoded as %T", m)
		}
		var actual []flows.Flow
		for _, s := range fs.Stats {
			stats++
			f := flows.FromStats(s)
			_ = f.String() + f.MatchString() + f.ActionsString() + string(f.Key())
			actual = append(actual, f)
		}
		var desired []flows.Flow
		for _, f := range actual {
			d := f
			d.Cookie ^= 1
			d.Instructions = nil
			desired = append(desired, d)
		}
		for _, ch := range []flows.Changes{flows.Diff(nil, actual), flows.Diff(desired, actual)} {
			_ = ch.String()
			for _, c := range ch.List() {
				_ = c.String()
			}
			for _, mod := range ch.FlowMods() {
				if _, err := mod.MarshalBinary(); err != nil {
					t.Errorf("a flow mod for a flow the switch reported does not encode: %v", err)
				}
			}
		}
	}
	t.Logf("%d of 30000 replies decoded, %d flow entries", decoded, stats)
	if decoded < 1000 {
		t.Fatalf("only %d replies decoded; the generator is off", decoded)
	}
}
