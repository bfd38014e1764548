package appliance

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/appliance/config"
)

// TestDaemonSystemdNotify plays systemd's side of Type=notify: a datagram
// socket in NOTIFY_SOCKET receives READY with a STATUS line, RELOADING on
// SIGHUP followed by READY again, and STOPPING at the end.
func TestDaemonSystemdNotify(t *testing.T) {
	dir := t.TempDir()
	sockPath := filepath.Join(dir, "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sockPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Setenv("NOTIFY_SOCKET", sockPath)

	messages := make(chan string, 32)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(messages)
				return
			}
			messages <- string(buf[:n])
		}
	}()
	next := func(want string) string {
		t.Helper()
		deadline := time.After(15 * time.Second)
		for {
			select {
			case m, ok := <-messages:
				if !ok {
					t.Fatalf("notify socket closed waiting for %q", want)
				}
				if strings.Contains(m, want) {
					return m
				}
			case <-deadline:
				t.Fatalf("no %q notification", want)
			}
		}
	}

	root := tempHost(t)
	cfgPath := filepath.Join(dir, "sos.hcl")
	writeFile(t, cfgPath, daemonConfig("100000"))
	td := startDaemon(t, root, dir, cfgPath, time.Hour)
	ready := next("READY=1")
	if !strings.Contains(ready, "STATUS=serial 1, 0 session(s), config ") {
		t.Errorf("READY without the status line: %q", ready)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if m := next("RELOADING=1"); !strings.Contains(m, "MONOTONIC_USEC=") {
		t.Errorf("RELOADING without MONOTONIC_USEC: %q", m)
	}
	next("READY=1")
	td.stop()
	// The stop asks for the drain's time and more: systemd's stop timeout
	// (90 s unless the unit sets one) would otherwise cut a longer
	// shutdown_timeout (found by review, helper-66).
	stopping := next("STOPPING=1")
	want := fmt.Sprintf("EXTEND_TIMEOUT_USEC=%d", (config.DefaultShutdownTimeout + stopMargin).Microseconds())
	if !strings.Contains(stopping, want) {
		t.Errorf("STOPPING without %s: %q", want, stopping)
	}
}
