package connlimit

import (
	"bufio"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestDeviceBoundFloodDoesNotDenyRoot: a local user floods the listener
// with connections bound to lo (each needs a listing of the node's
// sockets to find its owner), 3,000 a second (150 times the listing
// budget; a flood faster than the listener can refuse its connections
// fills the listen queue, and then every client's connection attempts
// wait to be retried, as on any TCP server), while root's own client,
// bound to lo too, asks five times. Every one of root's requests is
// answered, and none of the flood's connections is admitted. Before one
// listing answered every connection waiting for one, the flood spent the
// listing budget (20 a second) and root's client was refused as busy: the
// limit SECURITY.md named (helper-100).
func TestDeviceBoundFloodDoesNotDenyRoot(t *testing.T) {
	testsupport.RequireRoot(t, "setpriv", "python3")
	ln, addr := serve(t, 16, 8)
	ln.Allow([]netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")})
	// The flood: non-blocking connects, up to 800 held at once (the
	// child's descriptor limit may be 1,024), 3,000 a second, until root
	// is done (its standard input closes) or 30 s.
	script := boundFloodScript(portOf(addr), 3000, 800, 30)
	stop := startOtherUser(t, script)
	denied, began := ln.Denied(), time.Now()
	var failed []string
	for i := range 5 {
		start := time.Now()
		// Its connection attempts wait in the listen queue, or are
		// retried when the flood filled it.
		c, err := boundDialer("lo", 20*time.Second).Dial("tcp", addr)
		if err == nil {
			err = get(c)
			c.Close()
		}
		if err != nil {
			failed = append(failed, strconv.Itoa(i)+": "+err.Error())
		}
		t.Logf("root's request %d during the flood: %v", i, time.Since(start).Round(time.Millisecond))
		time.Sleep(100 * time.Millisecond)
	}
	deniedDuring, took := ln.Denied()-denied, time.Since(began)
	line, err := stop()
	if err != nil {
		t.Fatalf("the flood: %v", err)
	}
	f := strings.Fields(line)
	if len(f) != 2 {
		t.Fatalf("the flood's count: %q", line)
	}
	t.Logf("uid %d made %s device-bound connections; %d were refused while root asked (%.0f a second)",
		testsupport.OtherUID, f[0], deniedDuring, float64(deniedDuring)/took.Seconds())
	if f[1] != "0" {
		t.Errorf("%s of the flood's connections were answered", f[1])
	}
	if deniedDuring == 0 {
		t.Errorf("no connection of the flood was refused while root asked: the flood did not reach the listener")
	}
	if len(failed) > 0 {
		t.Errorf("root's device-bound requests refused during uid %d's flood: %s", testsupport.OtherUID, strings.Join(failed, "; "))
	}
}

// startOtherUser runs script with Python as testsupport.OtherUID, waits
// for its first line to be "up", and returns how to stop it: close its
// standard input, and return its last line and how it ended. The test's
// end stops it too.
// boundFloodScript is a Python flood of non-blocking connections to
// 127.0.0.1:port bound to lo (each needs a listing to find its owner):
// perSecond a second (0: as fast as it goes), up to held at once, until
// its standard input closes or for seconds. It prints "up" after 200,
// then how many it made and how many of those it held got an answer.
func boundFloodScript(port string, perSecond, held, seconds int) string {
	return fmt.Sprintf(`
import socket, sys, time, select
held, made, answered = [], 0, 0
start = time.time()
end = start + %d
while time.time() < end:
    if made %% 50 == 0:
        r, _, _ = select.select([sys.stdin], [], [], 0)
        if r:
            break
        ahead = made / %d.0 - (time.time() - start) if %d else 0
        if ahead > 0:
            time.sleep(ahead)
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, b"lo")
    s.setblocking(False)
    try:
        s.connect(("127.0.0.1", %s))
    except BlockingIOError:
        pass
    held.append(s)
    made += 1
    if len(held) > %d:
        old = held.pop(0)
        try:
            if old.recv(1):
                answered += 1
        except Exception:
            pass
        old.close()
    if made == 200:
        print("up", flush=True)
print(made, answered, flush=True)
`, seconds, max(perSecond, 1), perSecond, port, held)
}

func startOtherUser(t *testing.T, script string) (stop func() (string, error)) {
	t.Helper()
	cmd := testsupport.AsOtherUser(t, "/usr/bin/python3", "-c", script)
	stdin, err := cmd.StdinPipe()
	testsupport.RequireNoError(t, err)
	stdout, err := cmd.StdoutPipe()
	testsupport.RequireNoError(t, err)
	testsupport.RequireNoError(t, cmd.Start())
	out := bufio.NewScanner(stdout)
	if !out.Scan() || out.Text() != "up" {
		stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("the other user's script did not start: %q, %v", out.Text(), out.Err())
	}
	var once sync.Once
	var line string
	var werr error
	stop = func() (string, error) {
		once.Do(func() {
			stdin.Close()
			if out.Scan() {
				line = out.Text()
			}
			werr = cmd.Wait()
		})
		return line, werr
	}
	t.Cleanup(func() { _, _ = stop() })
	return stop
}
