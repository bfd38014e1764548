package ofp13_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/sdn/ofp13"
	"github.com/sosappliance/sosappliance/sdn/ovstest"
)

// roleClient is a bare OpenFlow 1.3 connection through the recorder, just
// enough to exchange role messages with ovs-vswitchd (ovs-ofctl has no
// role command).
type roleClient struct {
	t    *testing.T
	conn net.Conn
	br   *bufio.Reader
}

func dialRoleClient(t *testing.T, addr string) *roleClient {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := &roleClient{t: t, conn: conn, br: bufio.NewReader(conn)}
	c.send(ofp13.NewHello(ofp13.Version), 1)
	c.await(ofp13.TypeHello)
	return c
}

func (c *roleClient) send(m ofp13.Message, xid uint32) {
	m.SetTransactionID(xid)
	b, err := m.MarshalBinary()
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.conn.Write(b); err != nil {
		c.t.Fatal(err)
	}
}

// await reads until a message of type want arrives (skipping the switch's
// echo requests and asynchronous messages) and returns it.
func (c *roleClient) await(want ofp13.Type) ofp13.Message {
	c.t.Helper()
	c.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		hdr, err := c.br.Peek(8)
		if err != nil {
			c.t.Fatalf("waiting for %s: %v", want, err)
		}
		buf := make([]byte, binary.BigEndian.Uint16(hdr[2:4]))
		if _, err := io.ReadFull(c.br, buf); err != nil {
			c.t.Fatal(err)
		}
		m, err := ofp13.Unmarshal(buf)
		if err != nil {
			c.t.Fatalf("decode %x: %v", buf, err)
		}
		if m.MessageType() == want {
			return m
		}
	}
}

// TestCaptureRoleGoldens records testdata/role/roles.golden: two
// controllers taking the master role from each other on a live
// ovs-vswitchd, the role status the demoted one receives, and the error
// for a stale generation_id. Run with -update.
func TestCaptureRoleGoldens(t *testing.T) {
	if !*update {
		t.Skip("records goldens only with -update")
	}
	inst := ovstest.Start(t)
	port := inst.FreePort(t)
	inst.AddBridge(t, "br0", 0x00000000005053a2, fmt.Sprintf("ptcp:%d:127.0.0.1", port))
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

	a := dialRoleClient(t, ln.Addr().String())
	b := dialRoleClient(t, ln.Addr().String())
	time.Sleep(200 * time.Millisecond)
	rec.take() // the hellos are in probe.golden already

	a.send(&ofp13.RoleRequest{Role: ofp13.RoleMaster, GenerationID: 1}, 0x10)
	a.await(ofp13.TypeRoleReply)
	b.send(&ofp13.RoleRequest{Role: ofp13.RoleMaster, GenerationID: 2}, 0x20)
	b.await(ofp13.TypeRoleReply)
	a.await(ofp13.TypeExperimenter) // the role status telling a it is slave now
	a.send(&ofp13.RoleRequest{Role: ofp13.RoleMaster, GenerationID: 1}, 0x11)
	a.await(ofp13.TypeError)
	a.send(&ofp13.RoleRequest{Role: ofp13.RoleSlave, GenerationID: 2}, 0x12)
	a.await(ofp13.TypeRoleReply)
	b.send(&ofp13.RoleRequest{Role: ofp13.RoleNoChange}, 0x21)
	b.await(ofp13.TypeRoleReply)
	b.send(&ofp13.RoleRequest{Role: ofp13.RoleEqual}, 0x22)
	b.await(ofp13.TypeRoleReply)
	time.Sleep(200 * time.Millisecond)

	var sb strings.Builder
	sb.WriteString("# roles: two controllers, a and b, on one bridge. a asks MASTER with generation_id 1,\n")
	sb.WriteString("# b asks MASTER with 2 (a gets a role status: slave), a asks MASTER with 1 again (stale),\n")
	sb.WriteString("# a asks SLAVE with 2, b asks NOCHANGE, then EQUAL\n")
	fmt.Fprintf(&sb, "# peer: ovs-vswitchd %s (datapath_type=netdev, protocols=OpenFlow13) via a recording proxy\n", ovsVersion(t))
	sb.WriteString("# '>' is a controller to the switch, '<' the switch to a controller; '#|' is `ovs-ofctl ofp-print` of the message\n")
	n := 0
	for _, m := range rec.take() {
		if t := m.msg[1]; t == byte(ofp13.TypeEchoRequest) || t == byte(ofp13.TypeEchoReply) {
			continue
		}
		dir := "<"
		if m.toSwitch {
			dir = ">"
		}
		h := hex.EncodeToString(m.msg)
		fmt.Fprintf(&sb, "%s %s\n", dir, h)
		printed, err := exec.Command("ovs-ofctl", "ofp-print", h).CombinedOutput()
		if err != nil {
			t.Fatalf("ofp-print %s: %v", h, err)
		}
		for _, l := range strings.Split(strings.TrimRight(string(printed), "\n"), "\n") {
			fmt.Fprintf(&sb, "#| %s\n", l)
		}
		n++
	}
	if n == 0 {
		t.Fatal("nothing recorded")
	}
	mustWrite(t, filepath.Join("testdata", "role", "roles.golden"), sb.String())
}
