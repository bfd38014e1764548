package ofp13_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/sdn/ovstest"
)

// The golden files under testdata/ are OpenFlow 1.3 messages written by Open
// vSwitch itself: ovs-ofctl talking to a live ovs-vswitchd through a
// recording proxy. `go test ./sdn/ofp13 -run TestCaptureGoldens -update`
// records them again.
var (
	update     = flag.Bool("update", false, "record testdata/*.golden from a live Open vSwitch")
	updateOnly = flag.String("update-only", "", "with -update, write only the goldens of the exchanges with these comma-separated names")
)

type recorded struct {
	toSwitch bool
	msg      []byte
}

// recorder is a TCP proxy between an OpenFlow client and a switch that keeps
// every message that crosses it, in order.
type recorder struct {
	ln       net.Listener
	dial     func(ctx context.Context) (net.Conn, error)
	mu       sync.Mutex
	messages []recorded
	wg       sync.WaitGroup
}

func (r *recorder) serve() {
	for {
		client, err := r.ln.Accept()
		if err != nil {
			return
		}
		sw, err := r.dial(context.Background())
		if err != nil {
			client.Close()
			continue
		}
		r.wg.Add(2)
		go r.pump(client, sw, true)
		go r.pump(sw, client, false)
	}
}

func (r *recorder) pump(from, to net.Conn, toSwitch bool) {
	defer r.wg.Done()
	defer to.Close()
	defer from.Close()
	rd := bufio.NewReader(from)
	for {
		hdr, err := rd.Peek(8)
		if err != nil {
			return
		}
		n := int(binary.BigEndian.Uint16(hdr[2:4]))
		if n < 8 {
			return
		}
		msg := make([]byte, n)
		if _, err := io.ReadFull(rd, msg); err != nil {
			return
		}
		r.mu.Lock()
		r.messages = append(r.messages, recorded{toSwitch, msg})
		r.mu.Unlock()
		if _, err := to.Write(msg); err != nil {
			return
		}
	}
}

func (r *recorder) take() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.messages
	r.messages = nil
	return m
}

type exchange struct {
	name, about string
	// args for ovs-ofctl; PROXY is replaced by the recorder's target.
	args []string
	// background runs args while during() acts on the switch directly.
	during func(t *testing.T)
	// expectError allows ovs-ofctl to fail (the exchange records an error).
	expectError bool
	// keepTableFeatures keeps OFPMP_TABLE_FEATURES messages, which ovs-ofctl
	// sends before most flow commands and whose reply runs to megabytes;
	// only the first keepTableFeatures of them are kept.
	keepTableFeatures int
}

// isTableFeatures reports whether msg is a multipart TABLE_FEATURES request
// or reply.
func isTableFeatures(msg []byte) bool {
	return len(msg) >= 10 && (msg[1] == 18 || msg[1] == 19) && binary.BigEndian.Uint16(msg[8:10]) == 12
}

func TestCaptureGoldens(t *testing.T) {
	if !*update {
		t.Skip("records goldens only with -update")
	}
	inst := ovstest.Start(t)
	port := inst.FreePort(t)
	br := inst.AddBridge(t, "br0", 0x00000000005053a1, fmt.Sprintf("ptcp:%d:127.0.0.1", port))
	for i, mac := range []string{"02:00:00:00:00:01", "02:00:00:00:00:02"} {
		hw, _ := net.ParseMAC(mac)
		br.AttachHost(t, uint32(i+1), hw, netip.MustParsePrefix(fmt.Sprintf("10.77.0.%d/24", i+1)))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{ln: ln, dial: func(ctx context.Context) (net.Conn, error) {
		return inst.DialContext(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", port))
	}}
	go rec.serve()
	defer ln.Close()
	testsupport.Eventually(t, 10*time.Second, "the bridge to listen", func() bool {
		c, err := inst.DialContext(context.Background(), "tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	target := "tcp:" + ln.Addr().String()

	dir := t.TempDir()
	flowFile := filepath.Join(dir, "flows.txt")
	mustWrite(t, flowFile, strings.Join([]string{
		"cookie=0x5053000000000001,priority=3000,in_port=3,actions=NORMAL",
		"cookie=0x5053000000000002,priority=2000,tcp,nw_src=10.10.1.0/24,nw_dst=10.10.2.1,tp_dst=5201,actions=set_field:02:00:00:00:01:02->eth_dst,output:3",
		"cookie=0x5053000000000003,priority=2000,tcp,nw_src=10.10.2.1,tp_src=5201,nw_dst=10.10.1.0/24,actions=set_field:02:00:00:00:02:02->eth_dst,output:4",
		"cookie=0x5053000000000004,priority=1000,actions=NORMAL",
		"cookie=0x77,table=0,priority=1500,idle_timeout=30,hard_timeout=300,send_flow_rem,in_port=1,dl_src=02:00:00:00:00:01,dl_dst=02:00:00:00:00:00/ff:ff:ff:00:00:00,dl_vlan=5,actions=pop_vlan,output:2",
		"cookie=0x78,priority=1400,arp,arp_op=1,arp_spa=10.77.0.1,arp_tpa=10.77.0.0/24,arp_sha=02:00:00:00:00:01,arp_tha=00:00:00:00:00:00,actions=push_vlan:0x8100,set_field:4101->vlan_vid,group:1,CONTROLLER:128",
		"cookie=0x79,priority=1300,ip,nw_proto=17,actions=write_actions(output:2),goto_table:1",
		"cookie=0x7a,priority=1200,udp,tp_dst=53,actions=clear_actions",
		"cookie=0x7b,table=1,priority=10,tcp,tp_src=80,actions=output:1",
	}, "\n")+"\n")
	rangeFile := filepath.Join(dir, "ranges.txt")
	mustWrite(t, rangeFile, strings.Join([]string{
		"cookie=0x5053000000000011,priority=2000,tcp,nw_src=10.10.1.0/24,nw_dst=10.10.2.16/28,tp_dst=0xc350/0xfff0,actions=set_field:02:00:00:00:01:02->eth_dst,output:3",
		"cookie=0x5053000000000012,priority=2000,tcp,nw_src=10.10.2.16/28,tp_src=0xc360/0xfffc,nw_dst=10.10.1.0/24,actions=set_field:02:00:00:00:02:02->eth_dst,output:4",
		"cookie=0x5053000000000013,priority=2000,tcp6,ipv6_src=fd00:10:1::/64,ipv6_dst=fd00:10:2::10,tp_dst=0xc350/0xfff0,actions=set_field:02:00:00:00:01:02->eth_dst,output:3",
		"cookie=0x5053000000000014,priority=2000,tcp6,ipv6_src=fd00:10:2::10,ipv6_dst=fd00:10:1::/64,tp_src=5201,actions=set_field:02:00:00:00:02:02->eth_dst,output:4",
		"cookie=0x5053000000000015,priority=1900,ipv6,ipv6_dst=fd00:10:2::/48,actions=NORMAL",
	}, "\n")+"\n")

	exchanges := []exchange{
		{name: "probe", about: "version negotiation and an echo round trip", args: []string{"-O", "OpenFlow13", "probe", "PROXY"}},
		{name: "ping", about: "echo requests and replies with a payload", args: []string{"-O", "OpenFlow13", "ping", "PROXY", "24"}},
		{name: "hello-bitmap", about: "a hello that offers OpenFlow 1.0 and 1.3", args: []string{"-O", "OpenFlow10,OpenFlow13", "probe", "PROXY"}},
		{name: "show", about: "features request/reply and port descriptions", args: []string{"-O", "OpenFlow13", "show", "PROXY"}},
		{name: "dump-desc", about: "multipart DESC", args: []string{"-O", "OpenFlow13", "dump-desc", "PROXY"}},
		{name: "table-features", about: "multipart TABLE_FEATURES, a kind the codec keeps raw (request and first reply part only)",
			args: []string{"-O", "OpenFlow13", "dump-table-features", "PROXY"}, keepTableFeatures: 2},
		{name: "dump-tables", about: "multipart TABLE", args: []string{"-O", "OpenFlow13", "dump-tables", "PROXY"}},
		{name: "dump-ports-desc", about: "multipart PORT_DESC", args: []string{"-O", "OpenFlow13", "dump-ports-desc", "PROXY"}},
		{name: "get-frags", about: "GET_CONFIG request/reply", args: []string{"-O", "OpenFlow13", "get-frags", "PROXY"}},
		{name: "set-frags", about: "SET_CONFIG", args: []string{"-O", "OpenFlow13", "set-frags", "PROXY", "drop"}},
		{name: "add-group", about: "GROUP_MOD, a type the codec keeps raw", args: []string{"-O", "OpenFlow13", "add-group", "PROXY", "group_id=1,type=all,bucket=output:1,bucket=output:2"}},
		{name: "add-flows", about: "FLOW_MOD add with every match field, instruction and action the codec knows, then a barrier", args: []string{"-O", "OpenFlow13", "add-flows", "PROXY", flowFile}},
		{name: "dump-flows", about: "multipart FLOW request and the switch's flow stats", args: []string{"-O", "OpenFlow13", "dump-flows", "PROXY"}},
		{name: "dump-flows-cookie", about: "multipart FLOW filtered by cookie prefix", args: []string{"-O", "OpenFlow13", "dump-flows", "PROXY", "cookie=0x5053000000000000/0xffff000000000000"}},
		{name: "mod-flows", about: "FLOW_MOD modify with a cookie mask", args: []string{"-O", "OpenFlow13", "mod-flows", "PROXY", "cookie=0x5053000000000004/-1,actions=output:2"}},
		{name: "mod-flows-strict", about: "FLOW_MOD modify-strict", args: []string{"-O", "OpenFlow13", "--strict", "mod-flows", "PROXY", "priority=1000,actions=NORMAL"}},
		{name: "del-flows-strict", about: "FLOW_MOD delete-strict", args: []string{"-O", "OpenFlow13", "--strict", "del-flows", "PROXY", "priority=1200,udp,tp_dst=53"}},
		{name: "del-flows-cookie", about: "FLOW_MOD delete by cookie and mask", args: []string{"-O", "OpenFlow13", "del-flows", "PROXY", "cookie=0x7b/-1"}},
		{name: "error-bad-group", about: "an ERROR for a flow that outputs to a missing group", args: []string{"-O", "OpenFlow13", "add-flow", "PROXY", "priority=5,actions=group:99"}, expectError: true},
		{name: "error-table-full", about: "an ERROR for a flow beyond table 2's flow_limit", args: []string{"-O", "OpenFlow13", "add-flow", "PROXY", "table=2,priority=6,actions=drop"}, expectError: true},
		{name: "packet-out", about: "PACKET_OUT with a frame", args: []string{"-O", "OpenFlow13", "packet-out", "PROXY", "CONTROLLER", "output:1",
			"ffffffffffff020000000001080600010800060400010200000000010a4d00010000000000000a4d0002"}},
		{name: "add-flows-ranges", about: "FLOW_MOD add of the steering of port ranges (masked tcp_dst/tcp_src) and of IPv6 (ipv6_src/ipv6_dst), then a barrier", args: []string{"-O", "OpenFlow13", "add-flows", "PROXY", rangeFile}},
		{name: "monitor", about: "asynchronous PORT_STATUS, FLOW_REMOVED and PACKET_IN while ovs-ofctl monitor listens",
			args: []string{"-O", "OpenFlow13", "-P", "standard", "monitor", "PROXY", "65535"}, during: func(t *testing.T) {
				time.Sleep(500 * time.Millisecond)
				mustRun(t, func() (string, error) {
					return inst.Vsctl("--timeout=20", "add-port", "br0", "mon0", "--", "set", "interface", "mon0", "type=internal", "ofport_request=9")
				})
				mustRun(t, func() (string, error) {
					return br.Ofctl("add-flow", "cookie=0x99,priority=9,send_flow_rem,udp,actions=drop")
				})
				mustRun(t, func() (string, error) { return inst.Ofctl("--strict", "del-flows", "br0", "priority=9,udp") })
				mustRun(t, func() (string, error) {
					return br.Ofctl("packet-out", "CONTROLLER", "controller",
						"ffffffffffff020000000001080600010800060400010200000000010a4d00010000000000000a4d0002")
				})
				time.Sleep(500 * time.Millisecond)
			}},
	}

	// Table 2 holds one flow at most, so the error-table-full exchange
	// overflows it.
	mustRun(t, func() (string, error) {
		return inst.Vsctl("--timeout=20", "--", "--id=@t", "create", "flow_table", "flow_limit=1", "--", "set", "bridge", "br0", "flow_tables:2=@t")
	})
	mustRun(t, func() (string, error) { return br.Ofctl("add-flow", "table=2,priority=1,actions=drop") })

	for _, ex := range exchanges {
		args := make([]string, len(ex.args))
		shown := make([]string, len(ex.args))
		for i, a := range ex.args {
			args[i], shown[i] = a, a
			if a == "PROXY" {
				args[i], shown[i] = target, "tcp:127.0.0.1:PORT"
			}
			if a == flowFile || a == rangeFile {
				shown[i] = "FLOWS"
			}
		}
		cmd := exec.Command("ovs-ofctl", args...)
		cmd.Env = inst.Env()
		var out []byte
		if ex.during != nil {
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			ex.during(t)
			_ = cmd.Process.Signal(os.Interrupt)
			_ = cmd.Wait()
		} else {
			out, err = cmd.CombinedOutput()
			if err != nil && !ex.expectError {
				t.Fatalf("%s: %v\n%s", ex.name, err, out)
			}
		}
		time.Sleep(200 * time.Millisecond)
		var msgs []recorded
		dropped := 0
		for _, m := range rec.take() {
			if isTableFeatures(m.msg) {
				if ex.keepTableFeatures == 0 {
					dropped++
					continue
				}
				ex.keepTableFeatures--
			}
			msgs = append(msgs, m)
		}
		var b strings.Builder
		fmt.Fprintf(&b, "# %s: %s\n", ex.name, ex.about)
		fmt.Fprintf(&b, "# command: ovs-ofctl %s\n", strings.Join(shown, " "))
		if last := ex.args[len(ex.args)-1]; last == flowFile || last == rangeFile {
			for _, l := range strings.Split(strings.TrimSpace(readFile(t, last)), "\n") {
				fmt.Fprintf(&b, "#   FLOWS: %s\n", l)
			}
		}
		fmt.Fprintf(&b, "# peer: ovs-vswitchd %s (datapath_type=netdev, protocols=OpenFlow13) via a recording proxy\n", ovsVersion(t))
		if dropped > 0 {
			fmt.Fprintf(&b, "# left out: %d OFPMP_TABLE_FEATURES request/reply messages (see table-features.golden)\n", dropped)
		}
		b.WriteString("# '>' is ovs-ofctl to the switch, '<' the switch to ovs-ofctl; '#|' is `ovs-ofctl ofp-print` of the message\n")
		for _, m := range msgs {
			dir := "<"
			if m.toSwitch {
				dir = ">"
			}
			h := hex.EncodeToString(m.msg)
			fmt.Fprintf(&b, "%s %s\n", dir, h)
			printed, err := exec.Command("ovs-ofctl", "ofp-print", h).CombinedOutput()
			if err != nil {
				t.Fatalf("ofp-print %s: %v", h, err)
			}
			for _, l := range strings.Split(strings.TrimRight(string(printed), "\n"), "\n") {
				fmt.Fprintf(&b, "#| %s\n", l)
			}
		}
		if len(msgs) == 0 {
			t.Fatalf("%s: nothing recorded", ex.name)
		}
		if *updateOnly != "" && !slices.Contains(strings.Split(*updateOnly, ","), ex.name) {
			continue
		}
		mustWrite(t, filepath.Join("testdata", ex.name+".golden"), b.String())
	}
}

func ovsVersion(t *testing.T) string {
	out, err := exec.Command("ovs-vswitchd", "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(strings.SplitN(string(out), "\n", 2)[0])
	return f[len(f)-1]
}

func mustRun(t *testing.T, f func() (string, error)) {
	t.Helper()
	if out, err := f(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

func mustWrite(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
