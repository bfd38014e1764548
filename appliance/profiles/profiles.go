// Package profiles holds the built-in tuning profiles a tuning block names
// with base = "...": the values ESnet's fasterdata knowledge base gives for
// data-transfer hosts at 10, 40 and 100 Gbit/s, each with the page it comes
// from. It is a table, pure and without I/O, so that config can resolve a
// base and desired can say where each value came from.
//
// Only what the sources state is here. The fasterdata pages come first;
// the numbers they do not give (10G buffer sizes, the tcp_rmem and tcp_wmem
// triples, txqueuelen, optmem_max) come from fasterdata-tuning, a script
// that puts fasterdata's recommendations per NIC speed into code, and each
// value names the source it comes from. Where a source gives guidance
// rather than a number (bind NIC interrupts to the NIC's NUMA node, raise
// the ring buffers, turn SMT off) the profile carries it as a note that the
// plan shows, not as a value. Neither gives a congestion control, so that
// stays with the file.
package profiles

import (
	"slices"
	"sort"
)

// Profile is one named set of tuning values.
type Profile struct {
	Name string
	// Sysctls are set unless the tuning block sets the same key.
	Sysctls []Sysctl
	// MTU is applied to every interface block of the tuning block that
	// sets no mtu of its own; 0 leaves the MTU alone. A profile cannot
	// know the NIC's name, so it names no interface itself.
	MTU       int
	MTUSource string
	// TxQueueLen is applied, like MTU, to every interface block that sets
	// no txqueuelen of its own; 0 leaves it alone.
	TxQueueLen       int
	TxQueueLenSource string
	// Notes are the pages' advice that is no single value, shown in the
	// plan of every node that uses the profile.
	Notes []string
	// Sources are the pages the values and notes come from.
	Sources []Source
}

// Sysctl is one kernel parameter of a profile.
type Sysctl struct {
	Key, Value string
	// Source is the URL of the page that gives the value.
	Source string
	// Optional values are left out, with a warning in the plan, on a
	// node whose kernel cannot take them; a value the file sets is never
	// optional.
	Optional bool
}

// Source is a page or file read for a profile and the date it bears; Date
// says "read YYYY-MM-DD" when the page states none and the stored copy was
// all there was.
type Source struct {
	URL, Title, Date string
}

// The pages, as read from stored copies on 2026-12-01 (the copies show no
// date of their own but for what the Date fields quote).
var (
	pacing = Source{URL: "https://fasterdata.es.net/host-tuning/linux/packet-pacing/",
		Title: "Packet Pacing", Date: "no date on the page; read 2026-12-01"}
	mtu = Source{URL: "https://fasterdata.es.net/network-tuning/mtu-issues/",
		Title: "MTU Issues", Date: "no date on the page; read 2026-12-01"}
	tuning40g100g = Source{URL: "https://fasterdata.es.net/host-tuning/linux/100g-tuning/",
		Title: "40G/100G Network Tuning", Date: "no date on the page (it speaks of 5.x kernels); read 2026-12-01"}
	tuning100g = Source{URL: "https://fasterdata.es.net/host-tuning/100g-tuning",
		Title: "100G Network Tuning", Date: "no date on the page (it cites the 6.11 kernel); read 2026-12-01"}
	irq = Source{URL: "https://fasterdata.es.net/host-tuning/linux/100g-tuning/interrupt-binding/",
		Title: "Interrupt Binding", Date: "no date on the page; read 2026-12-01"}
	// The fasterdata Linux tuning page itself, which gives the buffer
	// sizes per NIC speed, was not among the stored pages; this script,
	// whose README calls it "Linux Host Network Tuning based on web site
	// fasterdata.es.net", carries them. Read at its last commit.
	script = Source{URL: "https://github.com/bltierney/fasterdata-tuning/blob/2a340e1/fasterdata_tuning.py",
		Title: "fasterdata-tuning (fasterdata_tuning.py, Brian Tierney)", Date: "commit 2a340e1 of 2025-10-24; read 2026-12-01"}
)

// Values quoted from the pages.
const (
	// Packet Pacing: "add this to /etc/sysctl.conf: net.core.default_qdisc
	// = fq"; "We recommend turning on FQ on all hosts connected to fast
	// networks." The kernel refuses fq where sch_fq is not built, so the
	// value is optional.
	qdiscFQ = "fq"
	// MTU Issues: "For Linux hosts using Jumbo Frames, we recommend
	// setting tcp_mtu_probing = 1 to help avoid the problem of MTU black
	// holes. Setting it to 2 sometimes causes performance problems."
	mtuProbing = "1"
	// MTU Issues recommends jumbo frames and checks the path with
	// "ping -4 -s 8972 -M do": 8972 bytes of ICMP payload plus 8 of ICMP
	// and 20 of IPv4 header is a 9000-byte MTU.
	jumboMTU = 9000
	// 40G/100G and 100G Network Tuning: "TCP buffer size set to the
	// maximum (2GB)". The kernel's largest value for rmem_max and
	// wmem_max, an int, is 2 GiB - 1.
	buffer2GB = "2147483647"

	// fasterdata_tuning.py, compute_default_sysctl_settings: the values
	// for hosts below 40G (10G among them), raised at 40G and at 100G.
	// Its 100G rmem_max and wmem_max are the pages' 2GB; at 40G it gives
	// 512 MiB where the 40G/100G page says 2GB, and the page is kept.
	buffer64MiB   = "67108864"
	rmem10g       = "4096 87380 33554432"
	wmem10g       = "4096 65536 33554432"
	rmem40g       = "4096 87380 268435456"
	wmem40g       = "4096 65536 268435456"
	rmem100g      = "4096 87380 1073741824"
	wmem100g      = "4096 65536 1073741824"
	optmem100g    = "1048576"
	noMetricsSave = "1"
	// fasterdata_tuning.py, TXQUEUELEN_DEFAULT, set on the tuned NIC
	// with ip link set dev IF txqueuelen.
	txQueueLen = 10000
)

var (
	// 32 MiB of tcp_rmem covers 32 MiB / RTT: 10 Gbit/s to about 27 ms,
	// 1.3 Gbit/s at 200 ms.
	bufferNote     = "fasterdata-tuning's buffers below 40G (tcp_rmem/tcp_wmem up to 32 MiB) fill 10 Gbit/s only up to about 27 ms RTT; on longer paths raise them in the file (window = rate x RTT)"
	congestionNote = "no source gives a congestion control: set congestion_control in the tuning block (the agents' streams) or net.ipv4.tcp_congestion_control in sysctl (the host's default)"
)

var irqNote = "Interrupt Binding: disable irqbalance and bind the NIC's IRQs to CPUs of the NIC's NUMA node (cat /sys/class/net/IF/device/numa_node, numactl --hardware); set irq_cpus in the interface block to that node's CPUs"

var table = []Profile{
	{
		Name: "fasterdata-10g",
		Sysctls: []Sysctl{
			{Key: "net.core.default_qdisc", Value: qdiscFQ, Source: pacing.URL, Optional: true},
			{Key: "net.core.rmem_max", Value: buffer64MiB, Source: script.URL},
			{Key: "net.core.wmem_max", Value: buffer64MiB, Source: script.URL},
			{Key: "net.ipv4.tcp_rmem", Value: rmem10g, Source: script.URL},
			{Key: "net.ipv4.tcp_wmem", Value: wmem10g, Source: script.URL},
			{Key: "net.ipv4.tcp_no_metrics_save", Value: noMetricsSave, Source: script.URL},
			{Key: "net.ipv4.tcp_mtu_probing", Value: mtuProbing, Source: mtu.URL},
		},
		MTU: jumboMTU, MTUSource: mtu.URL,
		TxQueueLen: txQueueLen, TxQueueLenSource: script.URL,
		Notes: []string{
			"MTU Issues: every host in the broadcast domain must use the same MTU; jumbo frames need a path that carries them",
			bufferNote,
			congestionNote,
		},
		Sources: []Source{pacing, mtu, script},
	},
	{
		Name: "fasterdata-40g",
		Sysctls: []Sysctl{
			{Key: "net.core.default_qdisc", Value: qdiscFQ, Source: tuning40g100g.URL, Optional: true},
			{Key: "net.core.rmem_max", Value: buffer2GB, Source: tuning40g100g.URL},
			{Key: "net.core.wmem_max", Value: buffer2GB, Source: tuning40g100g.URL},
			{Key: "net.ipv4.tcp_rmem", Value: rmem40g, Source: script.URL},
			{Key: "net.ipv4.tcp_wmem", Value: wmem40g, Source: script.URL},
			{Key: "net.ipv4.tcp_no_metrics_save", Value: noMetricsSave, Source: script.URL},
			{Key: "net.ipv4.tcp_mtu_probing", Value: mtuProbing, Source: mtu.URL},
		},
		MTU: jumboMTU, MTUSource: mtu.URL,
		TxQueueLen: txQueueLen, TxQueueLenSource: script.URL,
		Notes: []string{
			irqNote,
			"40G/100G Network Tuning: CPU governor 'performance'; ring buffers to the maximum (ethtool -G IF rx 8192 tx 8192) with interrupt coalescence on; SMT off; IOMMU on; flow control on (ethtool -A IF rx on tx on)",
			"MTU Issues: every host in the broadcast domain must use the same MTU; jumbo frames need a path that carries them",
			congestionNote,
		},
		Sources: []Source{tuning40g100g, irq, mtu, script},
	},
	{
		Name: "fasterdata-100g",
		Sysctls: []Sysctl{
			{Key: "net.core.default_qdisc", Value: qdiscFQ, Source: tuning100g.URL, Optional: true},
			{Key: "net.core.rmem_max", Value: buffer2GB, Source: tuning100g.URL},
			{Key: "net.core.wmem_max", Value: buffer2GB, Source: tuning100g.URL},
			{Key: "net.ipv4.tcp_rmem", Value: rmem100g, Source: script.URL},
			{Key: "net.ipv4.tcp_wmem", Value: wmem100g, Source: script.URL},
			{Key: "net.core.optmem_max", Value: optmem100g, Source: script.URL},
			{Key: "net.ipv4.tcp_no_metrics_save", Value: noMetricsSave, Source: script.URL},
			{Key: "net.ipv4.tcp_mtu_probing", Value: mtuProbing, Source: mtu.URL},
		},
		MTU: jumboMTU, MTUSource: mtu.URL,
		TxQueueLen: txQueueLen, TxQueueLenSource: script.URL,
		Notes: []string{
			irqNote,
			"100G Network Tuning: increase net.core.optmem_max (the page gives no value; the profile takes fasterdata-tuning's 1048576); CPU governor 'performance'; SMT off; IOMMU on; flow control on; ring buffers to 8192, which the page says no longer holds from the 6.11 kernel",
			"MTU Issues: every host in the broadcast domain must use the same MTU; jumbo frames need a path that carries them",
			congestionNote,
		},
		Sources: []Source{tuning100g, irq, mtu, script},
	},
}

// Lookup returns the profile of that name.
func Lookup(name string) (Profile, bool) {
	for _, p := range table {
		if p.Name == name {
			return clone(p), true
		}
	}
	return Profile{}, false
}

// Names lists the built-in profiles, sorted.
func Names() []string {
	out := make([]string, len(table))
	for i, p := range table {
		out[i] = p.Name
	}
	sort.Strings(out)
	return out
}

func clone(p Profile) Profile {
	p.Sysctls = slices.Clone(p.Sysctls)
	p.Notes = slices.Clone(p.Notes)
	p.Sources = slices.Clone(p.Sources)
	return p
}
