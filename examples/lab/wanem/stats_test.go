package wanem

import (
	"strings"
	"testing"
	"time"
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
	joining := JoiningLine("wan-a", "wan-b", Shape{Delay: 50 * time.Millisecond, Rate: 500e6}) + "\n"
	if !Joined(joining) || Joined(want.String()) {
		t.Errorf("Joined: true for %q and false for the counters, want the other way round", joining)
	}
	log := joining + want.String() + "\nsomething else\n" + later.String() + "\n"
	last, printed, ok, err := LastStats(log)
	if err != nil || !ok || printed != 2 || last != later {
		t.Errorf("LastStats = %+v, %d, %v, %v; want the second dump of two", last, printed, ok, err)
	}
	if _, printed, ok, err := LastStats("wanem: joining wan-a and wan-b\n"); ok || printed != 0 || err != nil {
		t.Errorf("LastStats of a log without counters = %d, %v, %v", printed, ok, err)
	}
	d, err := later.Since(want)
	if err != nil || d.AtoB.QueueDropPackets != 10 || d.AtoB.ReceivedPackets != 0 || d.AtoB.MaxQueueBytes != want.AtoB.MaxQueueBytes {
		t.Errorf("Since: %+v, %v", d.AtoB, err)
	}
}

// TestLastStatsTakesWholeDumps: a dump still being written when the log
// is read (its first line only), or a stray line, is passed over; the
// last whole dump is read with its ways the right way round.
func TestLastStatsTakesWholeDumps(t *testing.T) {
	one := Stats{AtoBName: "wan-a->wan-b", BtoAName: "wan-b->wan-a", AtoB: LinkStats{ReceivedPackets: 1}, BtoA: LinkStats{ReceivedPackets: 2}}
	two := one
	two.AtoB.ReceivedPackets, two.BtoA.ReceivedPackets = 3, 4
	aLine, _, _ := strings.Cut(two.String(), "\n")
	joining := JoiningLine("wan-a", "wan-b", Shape{}) + "\n"
	swapped := Stats{AtoBName: two.BtoAName, BtoAName: two.AtoBName, AtoB: two.BtoA, BtoA: two.AtoB}
	for _, c := range []struct {
		name, log string
		want      Stats
		printed   int
	}{
		// Read by position, the last two lines would be one's B-to-A
		// and two's A-to-B: mirrored names, swapped ways.
		{"half a dump", one.String() + "\n" + aLine + "\n", one, 1},
		{"the next dump begun", one.String() + "\n" + two.String() + "\n" + strings.Replace(aLine, "rx_pkts=3", "rx_pkts=9", 1) + "\n", two, 2},
		// The log names its ways; a first dump cut short before a
		// restart does not decide them.
		{"after a restart", joining + "dir=wan-b->w\n" + joining + two.String() + "\n", two, 1},
		// The joining line, not the first dump, says which way is A to B.
		{"ways from the joining line", JoiningLine("wan-b", "wan-a", Shape{}) + "\n" + swapped.String() + "\n" + swapped.String() + "\n", swapped, 2},
	} {
		got, printed, ok, err := LastStats(c.log)
		if err != nil || !ok || got != c.want || printed != c.printed {
			t.Errorf("%s: LastStats = %+v, %d, %v, %v; want %+v, %d", c.name, got, printed, ok, err, c.want, c.printed)
		}
	}
	// A line out of place, such as a dump's second line read with only
	// part of its name written, is an error, not the dump before it
	// counted as a new one.
	cut := one.String() + "\n" + aLine + "\ndir=wan-b->w"
	for name, log := range map[string]string{"A-to-B lines alone": aLine + "\n" + aLine + "\n", "a cut second line": cut} {
		if _, printed, ok, err := LastStats(log); ok || err == nil || !strings.Contains(err.Error(), "where a dump of wan-a->wan-b was expected") {
			t.Errorf("LastStats of %s: printed %d, ok %v, err %v", name, printed, ok, err)
		}
	}
}

// TestSinceRefusesAnotherReading: differences across an emulator's
// restart (a counter went down) or between two links are errors, not
// wrapped-around counts.
func TestSinceRefusesAnotherReading(t *testing.T) {
	before := Stats{AtoBName: "wan-a->wan-b", BtoAName: "wan-b->wan-a",
		AtoB: LinkStats{ReceivedPackets: 1000, QueueDropPackets: 50}, BtoA: LinkStats{ReceivedPackets: 500}}
	restarted := before
	restarted.AtoB = LinkStats{ReceivedPackets: 1200, QueueDropPackets: 3}
	if _, err := restarted.Since(before); err == nil || !strings.Contains(err.Error(), "wan-a->wan-b: queue_drop_pkts went from 50 down to 3") {
		t.Errorf("Since across a restart: %v", err)
	}
	other := before
	other.AtoBName, other.BtoAName = "wan-c->hub", "hub->wan-c"
	other.AtoB.ReceivedPackets = 5000
	if _, err := other.Since(before); err == nil || !strings.Contains(err.Error(), "wan-c->hub") {
		t.Errorf("Since of another link: %v", err)
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
		{"not one link's ways", strings.Replace(good, "dir=b->a", "dir=b->c", 1), "a->b and b->c are not one link's two ways"},
		{"ways swapped into one", strings.Replace(good, "dir=b->a", "dir=a->b", 1), "are not one link's two ways"},
	} {
		if _, err := ParseStats(c.in); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want %q", c.name, err, c.want)
		}
	}
}
