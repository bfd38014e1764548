package item

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/internal/portrange"
)

// TestSteeringInterfaceAsTheKernelJudges: validSteeringInterface
// says it is the kernel's rule (dev_valid_name). Each name is put to the
// kernel (a veth in a namespace of the test's own) and to Normalize; the
// verdicts must agree. The kernel's isspace is Latin-1 and byte-wise: it
// takes byte 0xa0 for white space, so it refuses "eà" (c3 a0), which
// validSteeringInterface, looking at runes, takes; an iifname rule on it
// would never match.
// Found by review (helper-73): the kernel reads names as bytes, and 0xA0
// is white space to it.
func TestSteeringInterfaceAsTheKernelJudges(t *testing.T) {
	ns := fmt.Sprintf("r73item%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	for i, name := range []string{"eth0.100", "a-b@c_d", "abcdefghijklmno", "eé", "eà", "e\u00a0x", "eth0:1", "a b"} {
		peer := fmt.Sprintf("r73p%d", i)
		out, err := exec.Command("ip", "-n", ns, "link", "add", "name", name, "type", "veth", "peer", "name", peer).CombinedOutput()
		kernel := err == nil
		if !kernel && !strings.Contains(string(out), "Invalid argument") && !strings.Contains(string(out), "not a valid ifname") {
			t.Fatalf("ip link add %q: %v: %s", name, err, out)
		}
		tp := TproxyRules{Interface: name, Mark: 1, ListenPort: 9876, Divert: []Divert{{
			Clients: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
			Servers: []netip.Prefix{netip.MustParsePrefix("10.1.0.1/32")},
			Ports:   []portrange.Range{portrange.Single(5201)},
		}}}
		_, nerr := tp.Normalize()
		if kernel != (nerr == nil) {
			t.Errorf("interface %q (% x): the kernel takes it: %v (%s), Normalize takes it: %v (%v)",
				name, name, kernel, strings.TrimSpace(string(out)), nerr == nil, nerr)
		}
	}
}
