package connlimit

import (
	"bufio"
	"net/netip"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// otherUserGet runs curl as another local user (testsupport.OtherUID)
// against addr and says whether it got the answer.
func otherUserGet(t *testing.T, addr string) bool {
	t.Helper()
	out, err := testsupport.AsOtherUser(t, "curl", "-sS", "-m", "10", "http://"+addr+"/").CombinedOutput()
	if err != nil {
		t.Logf("curl as uid %d: %v: %s", testsupport.OtherUID, err, strings.TrimSpace(string(out)))
		return false
	}
	return string(out) == "ok"
}

// TestAllowListRefusesOtherLocalUsers: with an allow list, a local user
// other than root could read the endpoint from an allowed address (any
// user binds 127.0.0.1 or the node's own address; found by review,
// helper-90). Such a connection is closed as it is accepted now, unless
// AllowUsers names the user; root's and, with no allow list, everyone's
// are served as before.
func TestAllowListRefusesOtherLocalUsers(t *testing.T) {
	testsupport.RequireRoot(t, "setpriv", "curl")
	ln, addr := serve(t, 16, 8)
	if !otherUserGet(t, addr) {
		t.Fatal("with no allow list, another local user is not served")
	}
	// The first curl's connection, closed, may still be on the list:
	// the allow list closes it too (its other end is gone).
	ln.Allow([]netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")})
	before := ln.Denied()
	if otherUserGet(t, addr) {
		t.Fatalf("another local user (uid %d) from an allowed address was served", testsupport.OtherUID)
	}
	if d := ln.Denied() - before; d != 1 {
		t.Errorf("denied %d, want 1", d)
	}
	if err := get(dialFrom(t, "127.0.0.1", addr)); err != nil {
		t.Fatalf("root from an allowed address: %v", err)
	}
	ln.AllowUsers([]uint32{testsupport.OtherUID})
	if !otherUserGet(t, addr) {
		t.Fatalf("a local user AllowUsers names (uid %d) is not served", testsupport.OtherUID)
	}
	if !refusedUnread(t, dialFrom(t, "127.0.0.2", addr)) {
		t.Fatal("root from outside the allow list was served")
	}
}

// TestAllowUsersNarrowedClosesOpenConnections: a user's open keep-alive
// connection is closed when AllowUsers no longer names the user, as Allow
// closes the sources it drops.
func TestAllowUsersNarrowedClosesOpenConnections(t *testing.T) {
	testsupport.RequireRoot(t, "setpriv", "python3")
	ln, addr := serve(t, 16, 8)
	ln.Allow([]netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")})
	ln.AllowUsers([]uint32{testsupport.OtherUID})
	host, port, _ := strings.Cut(addr, ":")
	// The client: one request on a keep-alive connection, its answer,
	// then it says whether the server closed the connection.
	cmd := testsupport.AsOtherUser(t, "/usr/bin/python3", "-c", `
import socket, sys
s = socket.create_connection(("`+host+`", `+port+`))
s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
got = b""
while not got.endswith(b"ok"):
    d = s.recv(4096)
    if not d: break
    got += d
print("answered" if got.endswith(b"ok") else "unanswered", flush=True)
s.settimeout(20)
try:
    print("closed" if s.recv(1) == b"" else "data", flush=True)
except socket.timeout:
    print("open", flush=True)
`)
	out, err := cmd.StdoutPipe()
	testsupport.RequireNoError(t, err)
	testsupport.RequireNoError(t, cmd.Start())
	defer cmd.Wait()
	defer cmd.Process.Kill()
	lines := bufio.NewScanner(out)
	if !lines.Scan() || lines.Text() != "answered" {
		t.Fatalf("the user's first request: %q", lines.Text())
	}
	ln.AllowUsers(nil)
	if !lines.Scan() || lines.Text() != "closed" {
		t.Fatalf("after AllowUsers(nil) the user's connection is %q, want closed", lines.Text())
	}
	if n := ln.Open(); n != 0 {
		t.Errorf("%d connections open", n)
	}
}

// TestResolveUsers: names and numeric uids; names this node lacks apart.
func TestResolveUsers(t *testing.T) {
	uids, unknown := ResolveUsers([]string{"root", "nobody", "4242", "no-such-user-here"})
	want := []uint32{0, testsupport.OtherUID, 4242}
	if len(uids) != len(want) || uids[0] != want[0] || uids[1] != want[1] || uids[2] != want[2] {
		t.Errorf("uids %v, want %v", uids, want)
	}
	if len(unknown) != 1 || unknown[0] != "no-such-user-here" {
		t.Errorf("unknown %v", unknown)
	}
}
