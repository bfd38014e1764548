package wanem

import (
	"fmt"
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
	fmt.Fprintf(b, "dir=%s rx_pkts=%d rx_bytes=%d fwd_pkts=%d fwd_bytes=%d"+
		" queue_drop_pkts=%d queue_drop_bytes=%d loss_drop_pkts=%d loss_drop_bytes=%d"+
		" oversize_drop_pkts=%d send_errors=%d kernel_drops=%d"+
		" queue_bytes=%d max_queue_bytes=%d delay_line_bytes=%d",
		name, s.ReceivedPackets, s.ReceivedBytes, s.ForwardedPackets, s.ForwardedBytes,
		s.QueueDropPackets, s.QueueDropBytes, s.LossDropPackets, s.LossDropBytes,
		s.OversizeDropPackets, s.SendErrors, s.KernelDrops,
		s.QueueBytes, s.MaxQueueBytes, s.DelayLineBytes)
}
