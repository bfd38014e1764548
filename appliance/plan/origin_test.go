package plan

import (
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/host/item"
)

// TestNewOriginsRoundTrip: 79d1aff writes steering items' origin
// as "agent NAME (FILE:LINE)" and 649829d annotates IRQ lines. A saved plan
// with the new origin, and one saved before it ("agent a1"), decode; the
// text shows the origin whole once, and the IRQ line's annotation names
// every IRQ once. Written by review (helper-87); it passed.
func TestNewOriginsRoundTrip(t *testing.T) {
	for _, origin := range []string{"agent a1 (/etc/sosappliance/sos.hcl:11)", "agent a1", "agent a1 (./odd (dir):name.hcl:7)"} {
		p := Diff([]item.Item{
			{Kind: item.KindSteering, Key: item.SteeringKeyRule, Value: "fwmark 0x80000001 lookup 3000000000", Origin: origin},
			{Kind: item.KindIRQ, Key: "eth1", Value: "0-1", Origin: "sos.hcl:20"},
		}, []item.Observation{
			{Item: item.Item{Kind: item.KindIRQ, Key: "eth1", Value: "40:0-1 41:0-1 42:0-1"}, Present: true},
		}, nil)
		p.Node = "host-a1"
		data, err := Encode(p)
		if err != nil {
			t.Fatalf("%s: encode: %v", origin, err)
		}
		back, err := Decode(data)
		if err != nil {
			t.Fatalf("%s: decode: %v\n%s", origin, err, data)
		}
		text := back.Text()
		if strings.Count(text, "from "+origin+"\n") != 1 {
			t.Errorf("%s: the text does not show the origin once:\n%s", origin, text)
		}
		if !strings.Contains(text, `"40:0-1 41:0-1 42:0-1" -> "0-1" (one CPU each: 40:0 41:1 42:0)`) {
			t.Errorf("%s: the IRQ line is not annotated as the spread:\n%s", origin, text)
		}
	}
}
