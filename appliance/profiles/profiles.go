// Package profiles holds the built-in tuning profiles a tuning block names
// with base = "...": the values ESnet's fasterdata knowledge base gives for
// data-transfer hosts at 10, 40 and 100 Gbit/s, each with the page it comes
// from. It is a table, pure and without I/O, so that config can resolve a
// base and desired can say where each value came from.
//
// Only what the pages state is here. Where a page gives guidance rather
// than a number (bind NIC interrupts to the NIC's NUMA node, raise the ring
// buffers, turn SMT off) the profile carries it as a note that the plan
// shows, not as a value; the pages read give no txqueuelen and, for 10G, no
// buffer sizes, so those stay with the file.
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

// Source is a page read for a profile and the date it bears; Date says
// "read YYYY-MM-DD" when the page states none and the stored copy was all
// there was.
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
)

var irqNote = "Interrupt Binding: disable irqbalance and bind the NIC's IRQs to CPUs of the NIC's NUMA node (cat /sys/class/net/IF/device/numa_node, numactl --hardware); set irq_cpus in the interface block to that node's CPUs"

var table = []Profile{
	{
		Name: "fasterdata-10g",
		Sysctls: []Sysctl{
			{Key: "net.core.default_qdisc", Value: qdiscFQ, Source: pacing.URL, Optional: true},
			{Key: "net.ipv4.tcp_mtu_probing", Value: mtuProbing, Source: mtu.URL},
		},
		MTU: jumboMTU, MTUSource: mtu.URL,
		Notes: []string{
			"MTU Issues: every host in the broadcast domain must use the same MTU; jumbo frames need a path that carries them",
			"the fasterdata pages read give no 10G buffer sizes: set net.core.rmem_max, wmem_max, tcp_rmem and tcp_wmem in the file",
		},
		Sources: []Source{pacing, mtu},
	},
	{
		Name: "fasterdata-40g",
		Sysctls: []Sysctl{
			{Key: "net.core.default_qdisc", Value: qdiscFQ, Source: tuning40g100g.URL, Optional: true},
			{Key: "net.core.rmem_max", Value: buffer2GB, Source: tuning40g100g.URL},
			{Key: "net.core.wmem_max", Value: buffer2GB, Source: tuning40g100g.URL},
			{Key: "net.ipv4.tcp_mtu_probing", Value: mtuProbing, Source: mtu.URL},
		},
		MTU: jumboMTU, MTUSource: mtu.URL,
		Notes: []string{
			irqNote,
			"40G/100G Network Tuning: CPU governor 'performance'; ring buffers to the maximum (ethtool -G IF rx 8192 tx 8192) with interrupt coalescence on; SMT off; IOMMU on; flow control on (ethtool -A IF rx on tx on)",
			"MTU Issues: every host in the broadcast domain must use the same MTU; jumbo frames need a path that carries them",
		},
		Sources: []Source{tuning40g100g, irq, mtu},
	},
	{
		Name: "fasterdata-100g",
		Sysctls: []Sysctl{
			{Key: "net.core.default_qdisc", Value: qdiscFQ, Source: tuning100g.URL, Optional: true},
			{Key: "net.core.rmem_max", Value: buffer2GB, Source: tuning100g.URL},
			{Key: "net.core.wmem_max", Value: buffer2GB, Source: tuning100g.URL},
			{Key: "net.ipv4.tcp_mtu_probing", Value: mtuProbing, Source: mtu.URL},
		},
		MTU: jumboMTU, MTUSource: mtu.URL,
		Notes: []string{
			irqNote,
			"100G Network Tuning: increase net.core.optmem_max (the page gives no value); CPU governor 'performance'; SMT off; IOMMU on; flow control on; ring buffers to 8192, which the page says no longer holds from the 6.11 kernel",
			"MTU Issues: every host in the broadcast domain must use the same MTU; jumbo frames need a path that carries them",
		},
		Sources: []Source{tuning100g, irq, mtu},
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
