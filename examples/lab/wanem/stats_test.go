package wanem

import (
	"strings"
	"testing"
)

func TestStatsRoundTripThroughTheirText(t *testing.T) {
	want := Stats{
		AtoBName: "wan-a->wan-b", BtoAName: "wan-b->wan-a",
		AtoB: LinkStats{ReceivedPackets: 125000, ReceivedBytes: 1 << 30, ForwardedPackets: 116000, ForwardedBytes: 1<<30 - 77<<20,
			QueueDropPackets: 8230, QueueDropBytes: 74_070_000, LossDropPackets: 119, LossDropBytes: 1_071_000,
			OversizeDropPackets: 1, SendErrors: 2, KernelDrops: 3, QueueBytes: 12_000_000, MaxQueueBytes: 12_500_000, DelayLineBytes: 6_250_000},
		BtoA: LinkStats{ReceivedPackets: 60000, ReceivedBytes: 4_000_000, ForwardedPackets: 60000, ForwardedBytes: 4_000_000},
	}
	got, err := ParseStats(want.String())
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("ParseStats(String()) =\n%+v\nwant\n%+v", got, want)
	}
	// In a log: the last of several dumps, between other lines.
	later := want
	later.AtoB.QueueDropPackets += 10
	log := "wanem: joining wan-a and wan-b: delay=100ms\n" + want.String() + "\nsomething else\n" + later.String() + "\n"
	last, printed, ok, err := LastStats(log)
	if err != nil || !ok || printed != 2 || last != later {
		t.Errorf("LastStats = %+v, %d, %v, %v; want the second dump of two", last, printed, ok, err)
	}
	if _, printed, ok, err := LastStats("wanem: joining wan-a and wan-b\n"); ok || printed != 0 || err != nil {
		t.Errorf("LastStats of a log without counters = %d, %v, %v", printed, ok, err)
	}
	d := later.Since(want)
	if d.AtoB.QueueDropPackets != 10 || d.AtoB.ReceivedPackets != 0 || d.AtoB.MaxQueueBytes != want.AtoB.MaxQueueBytes {
		t.Errorf("Since: %+v", d.AtoB)
	}
}

func TestParseStatsRejectsOtherText(t *testing.T) {
	good := Stats{AtoBName: "a->b", BtoAName: "b->a"}.String()
	lines := strings.Split(good, "\n")
	for _, c := range []struct{ name, in, want string }{
		{"one line", lines[0], "1 lines"},
		{"empty", "", "1 lines"},
		{"a field missing", strings.Replace(good, " send_errors=0", "", 1), "14 fields, want 15"},
		{"fields swapped", strings.Replace(good, "rx_pkts=0 rx_bytes=0", "rx_bytes=0 rx_pkts=0", 1), "field 2 is \"rx_bytes\", want rx_pkts"},
		{"not a count", strings.Replace(good, "kernel_drops=0", "kernel_drops=-1", 1), "kernel_drops=\"-1\": not a count"},
		{"no direction", strings.Replace(good, "dir=a->b", "direction=a->b", 1), "no dir= first"},
	} {
		if _, err := ParseStats(c.in); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want %q", c.name, err, c.want)
		}
	}
}
