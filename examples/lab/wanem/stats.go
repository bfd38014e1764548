package wanem

import (
	"fmt"
	"strconv"
	"strings"
)

// LinkStats counts what one direction did with the frames it read.
// Received = Forwarded + QueueDrop + LossDrop + frames still queued or in
// the delay line.
type LinkStats struct {
	ReceivedPackets uint64
	ReceivedBytes   uint64
	// Forwarded frames were handed to the outgoing interface; SendErrors of
	// them the kernel refused.
	ForwardedPackets uint64
	ForwardedBytes   uint64
	QueueDropPackets uint64
	QueueDropBytes   uint64
	LossDropPackets  uint64
	LossDropBytes    uint64
	// OversizeDropPackets were larger than the interface MTU, which means an
	// offload is still on; they are not part of Received.
	OversizeDropPackets uint64
	SendErrors          uint64
	// KernelDrops are frames the receiving socket lost before the emulator
	// read them; they are not part of Received either.
	KernelDrops uint64
	// QueueBytes and DelayLineBytes are the occupancy when the snapshot was
	// taken; MaxQueueBytes is the high-water mark of the queue.
	QueueBytes     int
	DelayLineBytes int
	MaxQueueBytes  int
}

// Stats holds both directions' counters, each labelled with the interfaces
// it reads from and writes to.
type Stats struct {
	AtoB, BtoA         LinkStats
	AtoBName, BtoAName string
}

// String renders one key=value line per direction, easy to read and to grep.
func (s Stats) String() string {
	var b strings.Builder
	writeLinkStats(&b, s.AtoBName, s.AtoB)
	b.WriteByte('\n')
	writeLinkStats(&b, s.BtoAName, s.BtoA)
	return b.String()
}

func writeLinkStats(b *strings.Builder, name string, s LinkStats) {
	b.WriteString("dir=" + name)
	for _, k := range statsKeys {
		switch f := k.field(&s).(type) {
		case *uint64:
			fmt.Fprintf(b, " %s=%d", k.key, *f)
		case *int:
			fmt.Fprintf(b, " %s=%d", k.key, *f)
		}
	}
}

// statsKeys are the keys of one direction's line in order, each with its
// field (a *uint64 or an *int): String writes them, ParseStats reads them.
var statsKeys = []struct {
	key   string
	field func(*LinkStats) any
}{
	{"rx_pkts", func(s *LinkStats) any { return &s.ReceivedPackets }},
	{"rx_bytes", func(s *LinkStats) any { return &s.ReceivedBytes }},
	{"fwd_pkts", func(s *LinkStats) any { return &s.ForwardedPackets }},
	{"fwd_bytes", func(s *LinkStats) any { return &s.ForwardedBytes }},
	{"queue_drop_pkts", func(s *LinkStats) any { return &s.QueueDropPackets }},
	{"queue_drop_bytes", func(s *LinkStats) any { return &s.QueueDropBytes }},
	{"loss_drop_pkts", func(s *LinkStats) any { return &s.LossDropPackets }},
	{"loss_drop_bytes", func(s *LinkStats) any { return &s.LossDropBytes }},
	{"oversize_drop_pkts", func(s *LinkStats) any { return &s.OversizeDropPackets }},
	{"send_errors", func(s *LinkStats) any { return &s.SendErrors }},
	{"kernel_drops", func(s *LinkStats) any { return &s.KernelDrops }},
	{"queue_bytes", func(s *LinkStats) any { return &s.QueueBytes }},
	{"max_queue_bytes", func(s *LinkStats) any { return &s.MaxQueueBytes }},
	{"delay_line_bytes", func(s *LinkStats) any { return &s.DelayLineBytes }},
}

// ParseStats reads what String wrote: the two direction lines, A to B
// first. Other lines around them (the emulator's log) are an error; see
// LastStats for a log.
func ParseStats(text string) (Stats, error) {
	lines := strings.Split(strings.TrimSpace(text), "\n")
	if len(lines) != 2 {
		return Stats{}, fmt.Errorf("wanem counters: %d lines, want 2 (one per direction)", len(lines))
	}
	var s Stats
	var err error
	if s.AtoBName, s.AtoB, err = parseLinkStats(lines[0]); err != nil {
		return Stats{}, err
	}
	if s.BtoAName, s.BtoA, err = parseLinkStats(lines[1]); err != nil {
		return Stats{}, err
	}
	if !mirrored(s.AtoBName, s.BtoAName) {
		return Stats{}, fmt.Errorf("wanem counters: directions %s and %s are not one link's two ways", s.AtoBName, s.BtoAName)
	}
	return s, nil
}

// mirrored reports whether b names the way back of a ("x->y", "y->x").
func mirrored(a, b string) bool {
	from, to, ok := strings.Cut(a, "->")
	return ok && b == to+"->"+from
}

// joiningPrefix starts the line the emulator logs once its sockets are
// open (JoiningLine).
const joiningPrefix = "wanem: joining "

// JoiningLine is the line the emulator logs once its sockets on a and b
// are open, with the shape it applies; LastStats reads the link's ways
// from it, and Joined tells a log that has it.
func JoiningLine(a, b string, s Shape) string {
	return fmt.Sprintf("%s%s and %s: delay=%v rate=%dbit/s queue=%dB loss=%v seed=%d",
		joiningPrefix, a, b, s.Delay, s.Rate, s.EffectiveQueueBytes(), s.Loss, s.Seed)
}

// Joined reports whether an emulator's log has its JoiningLine: it runs.
func Joined(log string) bool { return strings.Contains(log, joiningPrefix) }

// LastStats finds the last counters the emulator printed in its log (on
// SIGUSR1, every --stats-every, and on exit) and how many whole dumps it
// printed; ok is false when it printed none. A dump is a line of the
// A-to-B way (as its last "joining A and B" line names it, else as the
// log's first dump starts) followed by its mirror. A last line of the
// A-to-B way alone is a dump still being written and is not counted;
// any other line out of place is an error, so that a caller waiting for
// a new dump reads again rather than take an old one.
func LastStats(log string) (s Stats, printed int, ok bool, err error) {
	type dirLine struct{ name, text string }
	var dirs []dirLine
	first := ""
	for line := range strings.Lines(log) {
		if rest, found := strings.CutPrefix(line, joiningPrefix); found {
			a, rest, _ := strings.Cut(rest, " and ")
			b, _, _ := strings.Cut(rest, ":")
			first, dirs = a+"->"+b, nil
		}
		if rest, found := strings.CutPrefix(line, "dir="); found {
			name, _, _ := strings.Cut(rest, " ")
			dirs = append(dirs, dirLine{name, strings.TrimSpace(line)})
		}
	}
	if len(dirs) == 0 {
		return Stats{}, 0, false, nil
	}
	if first == "" {
		first = dirs[0].name
	}
	last := -1
	for i := 0; i < len(dirs); i += 2 {
		switch {
		case i+1 < len(dirs) && dirs[i].name == first && mirrored(first, dirs[i+1].name):
			last, printed = i, printed+1
		case i == len(dirs)-1 && dirs[i].name == first:
			// the next dump, its first line written
		default:
			return Stats{}, 0, false, fmt.Errorf("wanem counters: line %q where a dump of %s was expected", dirs[i].text, first)
		}
	}
	if last < 0 {
		return Stats{}, 0, false, nil
	}
	s, err = ParseStats(dirs[last].text + "\n" + dirs[last+1].text)
	return s, printed, err == nil, err
}

func parseLinkStats(line string) (string, LinkStats, error) {
	fields := strings.Fields(line)
	if len(fields) != 1+len(statsKeys) {
		return "", LinkStats{}, fmt.Errorf("wanem counters %q: %d fields, want %d", line, len(fields), 1+len(statsKeys))
	}
	name, ok := strings.CutPrefix(fields[0], "dir=")
	if !ok || name == "" {
		return "", LinkStats{}, fmt.Errorf("wanem counters %q: no dir= first", line)
	}
	var s LinkStats
	for i, k := range statsKeys {
		key, v, _ := strings.Cut(fields[i+1], "=")
		if key != k.key {
			return "", LinkStats{}, fmt.Errorf("wanem counters of %s: field %d is %q, want %s", name, i+2, key, k.key)
		}
		n, err := strconv.ParseUint(v, 10, 63)
		if err != nil {
			return "", LinkStats{}, fmt.Errorf("wanem counters of %s: %s=%q: not a count", name, key, v)
		}
		switch f := k.field(&s).(type) {
		case *uint64:
			*f = n
		case *int:
			*f = int(n)
		}
	}
	return name, s, nil
}

// Since is what the counters added after before (an earlier reading of
// the same emulator); the occupancy fields are s's own. It refuses a
// reading of other ways, or one in which a counter went down (the
// emulator restarted in between), whose differences would be wrong.
func (s Stats) Since(before Stats) (Stats, error) {
	if s.AtoBName != before.AtoBName || s.BtoAName != before.BtoAName {
		return Stats{}, fmt.Errorf("wanem counters of %s, %s before", s.AtoBName, before.AtoBName)
	}
	var err error
	if s.AtoB, err = s.AtoB.since(before.AtoB); err != nil {
		return Stats{}, fmt.Errorf("%s: %w", s.AtoBName, err)
	}
	if s.BtoA, err = s.BtoA.since(before.BtoA); err != nil {
		return Stats{}, fmt.Errorf("%s: %w", s.BtoAName, err)
	}
	return s, nil
}

// since subtracts every counter (the uint64 fields of statsKeys; the int
// ones are occupancy) of b from s's.
func (s LinkStats) since(b LinkStats) (LinkStats, error) {
	for _, k := range statsKeys {
		now, ok := k.field(&s).(*uint64)
		if !ok {
			continue
		}
		was := k.field(&b).(*uint64)
		if *now < *was {
			return LinkStats{}, fmt.Errorf("%s went from %d down to %d (the emulator restarted?)", k.key, *was, *now)
		}
		*now -= *was
	}
	return s, nil
}
