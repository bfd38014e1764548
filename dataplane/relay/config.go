package relay

import (
	"math"
	"net/netip"
	"syscall"

	"github.com/sosappliance/sosappliance/dataplane/agentspec"
)

// Encryption values of Config.Encryption.
const (
	EncryptionAESGCM = agentspec.EncryptionAESGCM
	EncryptionNone   = agentspec.EncryptionNone
)

// Config is everything an agent needs: the spec the appliance compiles,
// with the PSK joined. Its zero limits take agentspec's defaults, the
// same as the configuration's.
type Config = agentspec.Relay

// Whitelist is one accelerated flow.
type Whitelist = agentspec.Route

// Limits protect an agent; see agentspec.Limits.
type Limits = agentspec.Limits

// limitsOf fills the zero limits with the defaults, Memory with a quarter
// of this machine's RAM.
func limitsOf(l Limits) Limits {
	l = l.WithDefaults()
	if l.Memory <= 0 {
		l.Memory = defaultMemory()
	}
	return l
}

// HandshakesInFlight is how many stream handshakes a client-side agent
// runs at once toward one peer agent, across all its sessions: fewer than
// the peer's per-source pre-auth cap, so a session of thousands of stripes
// opens them in waves the peer admits instead of getting its own stripes
// evicted.
const HandshakesInFlight = 64

// defaultMemory is a quarter of the machine's RAM, or 1 GiB if it cannot
// be read.
func defaultMemory() int64 {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil || si.Totalram == 0 {
		return 1 << 30
	}
	return int64(min(uint64(si.Totalram)*uint64(si.Unit)/4, math.MaxInt64))
}

// lookup finds the whitelist entry of a connection from client to server.
func lookup(list []Whitelist, client netip.Addr, server netip.AddrPort) (Whitelist, bool) {
	for _, w := range list {
		if w.Matches(client, server) {
			return w, true
		}
	}
	return Whitelist{}, false
}
