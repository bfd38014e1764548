// Package item is the vocabulary of the host state sosappliance owns: the
// Item and its Observation, the kinds of items, their keys, and the canonical
// text of their values. It does no I/O, so that the pure layers (config,
// desired, plan) speak it without linking the executors (package tuning)
// that observe and apply items.
//
// Every value is canonical text, so desired and observed values compare with
// ==. Canonical rewrites any accepted spelling into the canonical one. The
// kinds, keys and values:
//
//	kind       key                      value
//	sysctl     dotted name, sysctl(8)   the value with runs of blanks made one
//	           spelling: "/" for a dot  space: "4096 87380 67108864"
//	           inside a level
//	           ("net.ipv4.conf.eth1/100.rp_filter")
//	irq        interface name ("eth1")  a CPU list in the kernel's form
//	                                    ("0-3,8"): spread the interface's IRQs
//	                                    one CPU each over it; or a per-IRQ
//	                                    affinity "45:0 46:1-3,5" (what Observe
//	                                    reports when the IRQs are not spread
//	                                    like that, and what rollback restores)
//	interface  "IF/mtu", "IF/txqueuelen" decimal: "9000"
//	relay      "cpus"                   obsolete: relay pinning is in the relay spec
//	steering   "nftables"               TproxyRules.Canonical(): compact JSON
//	                                    {"interface":"eth1","mark":21327,
//	                                    "listen_port":9876,"divert":[{"clients":
//	                                    ["10.10.1.0/24"],"server":"10.10.2.1",
//	                                    "port":5201}]}, diverts merged per
//	                                    server and port, all lists sorted;
//	                                    without diverts only {"mark":N,
//	                                    "divert":[]}
//	steering   "rule"                   "fwmark 0x534f lookup 21327 priority 21327"
//	steering   "route"                  "local 0.0.0.0/0 dev lo table 21327"
//
// SteeringSpec.Items builds the steering items, and the loose rp_filter
// sysctl of the agent interface, from one struct.
package item
