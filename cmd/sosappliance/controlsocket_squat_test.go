package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// squatterServer is a perl program that listens on the unix socket
// ARGV[0] and answers every request with a daemon's status of its own
// making (node host1, config_path /nobody/was/here).
const squatterServer = `
use IO::Socket::UNIX;
my $s = IO::Socket::UNIX->new(Type => SOCK_STREAM(), Local => $ARGV[0], Listen => 16) or die "listen: $!";
chmod 0666, $ARGV[0];
my $body = '{"node":"host1","roles":["agent:a1"],"config_path":"/nobody/was/here","config_hash":"0","serial":7,"drift":{}}';
while (my $c = $s->accept()) {
	while (my $l = <$c>) { last if $l =~ /^\r?\n$/; }
	print $c "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " . length($body) . "\r\nConnection: close\r\n\r\n" . $body;
	close $c;
}
`

// TestControlSocketSquattedByAnotherUser: daemon.control_socket names a
// place every user can write (/tmp/sos.sock; here a sticky 01777
// directory of the test), and another user got there first with a socket
// of their own that answers like a daemon. Run as root:
//
//   - `status` shows their answer as the daemon's (config, serial, roles);
//   - `apply` refuses to run, "a sosappliance daemon answers ... for node
//     host1": any local user can stop every apply on the node;
//   - `run` refuses to start, the socket being "in use by another running
//     daemon" (ListenControl; not asserted here).
//
// Found by review (helper-90): nothing checks daemon.control_socket's
// directory (only the state database, the config, a plan and keys are
// checked by filetrust), and the CLI takes whatever answers on the path
// for the daemon (no SO_PEERCRED check of the server's uid). Refuse a
// control socket in a directory others can write, as the state database
// is, or have the CLI and the daemon's start check that whoever listens
// is root (or the user running).
func TestControlSocketSquattedByAnotherUser(t *testing.T) {
	testsupport.RequireRoot(t, "setpriv", "perl")
	n := newTuningNode(t)
	shared := testsupport.SharedTempDir(t)
	testsupport.RequireNoError(t, os.Chmod(shared, 0o777|os.ModeSticky))
	socket := filepath.Join(shared, "sos.sock")
	writeConfig(t, n.cfg, hostTuningFile("67108864",
		"daemon {\n  state_path = \""+filepath.Join(n.dir, "state.db")+"\"\n  control_socket = \""+socket+"\"\n}\n"))

	squatter := testsupport.AsOtherUser(t, "perl", "-e", squatterServer, socket)
	var squatterOut testsupport.LockedBuffer
	squatter.Stdout, squatter.Stderr = &squatterOut, &squatterOut
	testsupport.RequireNoError(t, squatter.Start())
	t.Cleanup(func() {
		_ = squatter.Process.Kill()
		_ = squatter.Wait()
	})
	testsupport.Eventually(t, 5*time.Second, "the other user's socket", func() bool {
		_, err := os.Stat(socket)
		return err == nil
	})

	code, out, errOut := runCLI(t, "status", "-c", n.cfg)
	t.Logf("status: exit %d\n%s%s", code, out, errOut)
	if strings.Contains(out+errOut, "/nobody/was/here") {
		t.Errorf("status, run as root, showed another user's socket's answer as the daemon's (exit %d):\n%s%s", code, headLines(out, 8), errOut)
	}

	code, out, errOut = runCLI(t, "apply", "--auto-approve", "-c", n.cfg, "--node", "host1", "--root", n.root)
	t.Logf("apply: exit %d\n%s%s", code, out, errOut)
	if v := rmemMaxIn(t, n.root); v != "67108864" {
		t.Errorf("apply did not apply (rmem_max %s, exit %d): another user's socket on %s stopped it:\n%s", v, code, socket, errOut)
	}
}
