package config

import (
	"fmt"
	"math"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/sosappliance/sosappliance/host/cpuset"
)

// ParseCPUList reads a Linux CPU list such as "0-3,8"; the executors and
// the config share one parser so they agree on every spelling.
func ParseCPUList(s string) ([]int, error) { return cpuset.Parse(s) }

// FormatCPUList writes CPUs in the kernel's compact list form, "0-3,8".
func FormatCPUList(cpus []int) string { return cpuset.Format(cpus) }

var byteUnits = []struct {
	suffix string
	factor int64
}{
	// Longest suffixes first so "KiB" is not read as "B".
	{"KIB", 1 << 10}, {"MIB", 1 << 20}, {"GIB", 1 << 30},
	{"KB", 1000}, {"MB", 1000 * 1000}, {"GB", 1000 * 1000 * 1000},
	{"K", 1000}, {"M", 1000 * 1000}, {"G", 1000 * 1000 * 1000},
	{"B", 1},
}

// ParseByteSize reads "60000", "60KB" (SI, 60,000), "64KiB" (65,536) and
// the like.
func ParseByteSize(s string) (int64, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	factor := int64(1)
	for _, u := range byteUnits {
		if strings.HasSuffix(t, u.suffix) {
			factor = u.factor
			t = strings.TrimSpace(strings.TrimSuffix(t, u.suffix))
			break
		}
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, fmt.Errorf("%q is not a byte size", s)
	}
	v := f * float64(factor)
	if v > math.MaxInt64/2 {
		return 0, fmt.Errorf("byte size %q is too large", s)
	}
	if v != math.Trunc(v) {
		return 0, fmt.Errorf("byte size %q is not a whole number of bytes", s)
	}
	return int64(v), nil
}

// ParseDatapathID reads "00:00:00:00:00:00:00:01", "0x1" or "1".
func ParseDatapathID(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	if strings.Contains(t, ":") {
		parts := strings.Split(t, ":")
		if len(parts) != 8 {
			return 0, fmt.Errorf("datapath id %q must have 8 colon-separated bytes", s)
		}
		var v uint64
		for _, p := range parts {
			b, err := strconv.ParseUint(p, 16, 8)
			if err != nil || len(p) != 2 {
				return 0, fmt.Errorf("datapath id %q has a bad byte %q", s, p)
			}
			v = v<<8 | b
		}
		return v, nil
	}
	v, err := strconv.ParseUint(t, 0, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a datapath id", s)
	}
	return v, nil
}

// FormatDatapathID writes a datapath id the way ovs-ofctl shows it.
func FormatDatapathID(v uint64) string {
	return fmt.Sprintf("%016x", v)
}

// ParseMAC reads a 48-bit unicast Ethernet address.
func ParseMAC(s string) (net.HardwareAddr, error) {
	mac, err := net.ParseMAC(strings.TrimSpace(s))
	if err != nil || len(mac) != 6 {
		return nil, fmt.Errorf("%q is not a 48-bit MAC address", s)
	}
	if mac[0]&1 != 0 {
		return nil, fmt.Errorf("%q is a multicast MAC address", s)
	}
	return mac, nil
}

// ParsePrefix reads an IPv4 or IPv6 prefix whose host bits are zero; a
// bare address is its one-host prefix.
func ParsePrefix(s string) (netip.Prefix, error) {
	t := strings.TrimSpace(s)
	p, err := netip.ParsePrefix(t)
	if err != nil {
		if a, aerr := netip.ParseAddr(t); aerr == nil && a.Zone() == "" {
			if a.Is4In6() {
				return netip.Prefix{}, fmt.Errorf("%q is an IPv4-mapped IPv6 address; write %s", s, a.Unmap())
			}
			return netip.PrefixFrom(a, a.BitLen()), nil
		}
		return netip.Prefix{}, fmt.Errorf("%q is not a prefix such as 10.10.1.0/24 or 2001:db8:1::/48", s)
	}
	if p.Addr().Is4In6() {
		return netip.Prefix{}, fmt.Errorf("%q is IPv4-mapped; write the IPv4 prefix", s)
	}
	if p.Masked() != p {
		return netip.Prefix{}, fmt.Errorf("%q has host bits set; did you mean %s?", s, p.Masked())
	}
	return p, nil
}

// ParseAddr reads an IPv4 or IPv6 address.
func ParseAddr(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(strings.TrimSpace(s))
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("%q is not an IP address", s)
	}
	if a.Is4In6() {
		return netip.Addr{}, fmt.Errorf("%q is an IPv4-mapped IPv6 address; write %s", s, a.Unmap())
	}
	return a, nil
}

// ParseDuration reads a Go duration such as "30s" or "2m".
func ParseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%q is not a positive duration such as \"30s\"", s)
	}
	return d, nil
}

// ValidHostPort checks a listen or dial address "host:port".
func ValidHostPort(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%q is not host:port", s)
	}
	if host != "" && host != "localhost" {
		if _, err := netip.ParseAddr(host); err != nil {
			return fmt.Errorf("%q: host %q is not an IP address", s, host)
		}
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("%q: port %q is not 0-65535", s, port)
	}
	return nil
}

// validInterfaceName follows the kernel's rules for network device names.
func validInterfaceName(s string) bool {
	if s == "" || len(s) > 15 || s == "." || s == ".." {
		return false
	}
	for _, r := range s {
		if r <= ' ' || r == '/' || r == ':' || r > '~' {
			return false
		}
	}
	return true
}

// validSysctlName accepts dotted names like net.ipv4.tcp_rmem; whether the
// key exists on the node is checked at plan time.
func validSysctlName(s string) bool {
	if s == "" || strings.HasPrefix(s, ".") || strings.HasSuffix(s, ".") || strings.Contains(s, "..") {
		return false
	}
	for _, r := range s {
		if !(r == '.' || r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return strings.Contains(s, ".")
}
