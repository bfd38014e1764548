package labnet

import (
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// testdata/ss-packet-sockets.txt is `ss -0 -a -m -p` (iproute2 6.1, with
// its header) in the switch namespace of a lab whose switch still used
// glibc's default heap policy, after a dozen transfers.

func TestParsePortSockets(t *testing.T) {
	raw, err := os.ReadFile("testdata/ss-packet-sockets.txt")
	if err != nil {
		t.Fatal(err)
	}
	// Another program's packet socket is not the switch's.
	out := string(raw) + `p_raw UNCONN 0 0 *:eth9 * users:(("tcpdump",pid=9,fd=3)) skmem:(r0,rb212992,t0,tb212992,f0,w0,o0,bl0,d5)` + "\n"
	got, err := parsePortSockets(out)
	if err != nil {
		t.Fatal(err)
	}
	buf := switchPortBuffer
	want := []PortSocket{
		{"a-ctl", buf, buf, 0}, {"a-wan", buf, buf, 0}, {"a-client", buf, buf, 739}, {"a-agent", buf, buf, 7832},
		{"b-server", buf, buf, 0}, {"b-agent", buf, buf, 0}, {"b-wan", buf, buf, 1974},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	// A socket bound to one protocol names it before the port.
	got, err = parsePortSockets(`p_raw UNCONN 0 0 ip:a-wan * users:(("ovs-vswitchd",pid=1,fd=3)) skmem:(r0,rb1,t0,tb2,f0,w0,o0,bl0,d3)`)
	if err != nil || len(got) != 1 || got[0] != (PortSocket{"a-wan", 1, 2, 3}) {
		t.Errorf("protocol-bound socket: %+v, %v", got, err)
	}
}

func TestParsePortSocketsRejectsWhatItCannotRead(t *testing.T) {
	for _, line := range []string{
		`p_raw UNCONN 0 0 *:a-wan * users:(("ovs-vswitchd",pid=1,fd=3))`,
		`p_raw UNCONN 0 0 *:a-wan * users:(("ovs-vswitchd",pid=1,fd=3)) skmem:(r0,rb8388608,t0,tb8388608`,
		`p_raw UNCONN 0 0 *:a-wan * users:(("ovs-vswitchd",pid=1,fd=3)) skmem:(r0,rb8388608,t0,tb8388608,f0)`,
		`p_raw UNCONN 0 0 *:a-wan * users:(("ovs-vswitchd",pid=1,fd=3)) skmem:(r0,rbx,t0,tb8388608,d0)`,
		`p_raw UNCONN 0 0 *:a-wan * users:(("ovs-vswitchd",pid=1,fd=3)) skmem:(r0,rb1,t0,tb1,d-1)`,
	} {
		if socks, err := parsePortSockets(line); err == nil {
			t.Errorf("parsePortSockets(%q) = %+v, want an error", line, socks)
		} else if !strings.Contains(err.Error(), "a-wan") {
			t.Errorf("error %q does not name the port", err)
		}
	}
	if socks, err := parsePortSockets(`p_raw UNCONN "ovs-vswitchd"`); err == nil {
		t.Errorf("a cut line read as %+v", socks)
	}
}

func FuzzParsePortSockets(f *testing.F) {
	raw, err := os.ReadFile("testdata/ss-packet-sockets.txt")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(raw))
	f.Add(`p_raw UNCONN 0 0 *:a-wan * users:(("ovs-vswitchd",pid=1,fd=3)) skmem:(rb1,tb1,d1)`)
	f.Add(`x y z w ::: "ovs-vswitchd" skmem:(`)
	f.Fuzz(func(t *testing.T, out string) {
		socks, err := parsePortSockets(out)
		if err != nil {
			return
		}
		for _, s := range socks {
			if s.Port == "" || s.Port == "*" || s.RecvBuffer < 0 || s.SendBuffer < 0 {
				t.Errorf("read %+v from %q", s, out)
			}
		}
	})
}

func TestDropsSince(t *testing.T) {
	before := []PortSocket{{Port: "a-agent", Drops: 100}, {Port: "b-wan", Drops: 7}, {Port: "a-wan", Drops: 50}}
	after := []PortSocket{
		{Port: "a-agent", Drops: 130}, // 30 more
		{Port: "b-wan", Drops: 7},     // none
		{Port: "a-wan", Drops: 4},     // opened again: its 4 are new
		{Port: "a-client", Drops: 2},  // new port: its 2
	}
	if got := DropsSince(before, after); got != 36 {
		t.Errorf("DropsSince = %d, want 36", got)
	}
	if got := DropsSince(nil, nil); got != 0 {
		t.Errorf("DropsSince(nil, nil) = %d", got)
	}
}

// TestSwitchMallocIsWhatGlibcReads asks the dynamic loader how it reads
// the lab's heap policy: glibc ignores a tunable it does not know, so a
// misspelt one would leave the switch on the default policy unnoticed.
func TestSwitchMallocIsWhatGlibcReads(t *testing.T) {
	testsupport.RequireBinaries(t, "ld.so")
	cmd := exec.Command("ld.so", "--list-tunables")
	cmd.Env = mergeTunables([]string{"PATH=" + os.Getenv("PATH")}, switchMalloc)
	out, err := cmd.Output()
	testsupport.RequireNoError(t, err) // glibc before 2.33 has no --list-tunables
	if !strings.Contains(string(out), "glibc.malloc.trim_threshold: 0x4000000 ") {
		t.Errorf("glibc does not read a 64 MiB trim threshold from %q:\n%s", switchMalloc, out)
	}
}

func TestMergeTunablesKeepsTheCallersOwn(t *testing.T) {
	got := mergeTunables([]string{"A=1", "GLIBC_TUNABLES=glibc.cpu.x86_rep_movsb_threshold=4096", "B=2"}, "GLIBC_TUNABLES=glibc.malloc.trim_threshold=8")
	want := []string{"A=1", "B=2", "GLIBC_TUNABLES=glibc.cpu.x86_rep_movsb_threshold=4096:glibc.malloc.trim_threshold=8"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q\nwant %q", got, want)
	}
	if got := mergeTunables([]string{"A=1"}, "GLIBC_TUNABLES=x=1"); !reflect.DeepEqual(got, []string{"A=1", "GLIBC_TUNABLES=x=1"}) {
		t.Errorf("without the caller's: %q", got)
	}
}
