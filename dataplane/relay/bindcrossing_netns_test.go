package relay

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/dataplane/agentspec"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestNetnsFarAgentEndedAsABindCrossed: on a 600 ms RTT path the far
// agent's process is killed with its warm pool idle, and a connection
// claims the pooled streams before the kernel's FINs for them arrive.
// The BINDs cross the FINs and meet closed sockets, which answer them
// with resets and never read them: nothing was founded. Before, the
// client side read each FIN after its BIND as the far agent's process
// ending with the session possibly founded, and reset the client. Now
// the FIN's acknowledgment, short of the BIND, says the BIND was never
// read (finBefore): the streams count as lost, stream 0 founds the
// session again at the restarted far agent, and the upload completes,
// accelerated, the server getting it once. (The case where the far agent
// read the BIND and then ended still aborts: the TestPooledSession*Died
// tests and TestPooledSessionFoundedThenFarAgentRestarted.)
func TestNetnsFarAgentEndedAsABindCrossed(t *testing.T) {
	t.Parallel() // mostly waiting, in namespaces of its own
	testsupport.RequireRoot(t, "ip", "curl")
	const oneWay = 300 * time.Millisecond
	l := newDelayedLab(t, oneWay)
	agentA, agentB, srv := startHTTPAgents(t, l, agentspec.Pool{MinIdle: 4, Max: 4})
	testsupport.Eventually(t, 60*time.Second, "a full pool", func() bool {
		ps := agentA.pools(t)
		return len(ps) == 1 && ps[0].Idle == 4
	})

	body := bytes.Repeat([]byte("crossing "), (1<<20)/9)
	file := filepath.Join(t.TempDir(), "up")
	if err := os.WriteFile(file, body, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(body)
	curl := exec.Command("ip", "netns", "exec", l.cli, "curl", "-sS", "--fail", "--max-time", "60",
		"-T", file, "http://"+labServer.String()+"/up")
	var out, stderr bytes.Buffer
	curl.Stdout, curl.Stderr = &out, &stderr

	agentB.Kill()
	killed := time.Now()
	if err := curl.Start(); err != nil {
		t.Fatal(err)
	}
	started := time.Since(killed)
	// The far agent comes back once its FINs have reached the client side
	// and the BINDs' resets have come back.
	time.Sleep(4 * oneWay)
	startLabAgent(t, l.agB, labAgentB())
	err := curl.Wait()
	ta := agentA.stats(t).Totals
	ps := agentA.pools(t)
	t.Logf("curl started %s after the kill; client side: %d aborted, %d carried direct, %d streams lost; pool %+v",
		started.Round(time.Millisecond), ta.SessionsAborted, ta.Fallbacks, ta.StreamsLost, ps)
	if err != nil {
		t.Fatalf("curl upload: %v: %s; recent aborts %+v", err, stderr.String(), agentA.stats(t).RecentAborts)
	}
	if out.String() != hex.EncodeToString(sum[:]) {
		t.Fatalf("server hashed the upload as %q, want %x", out.String(), sum)
	}
	if r := srv.next(t, "http request"); !strings.HasPrefix(r, "remote "+labClient.String()+":") {
		t.Errorf("http server saw %q, want the client %s", r, labClient)
	}
	if len(ps) != 1 || ps[0].Claims == 0 || ps[0].Refounds == 0 {
		t.Fatalf("the session did not claim the pooled streams and found itself again (the claim came after the FINs? curl started %s after the kill): pool %+v",
			started.Round(time.Millisecond), ps)
	}
	if ta.SessionsAborted != 0 || ta.Fallbacks != 0 {
		t.Errorf("client side: %d sessions aborted, %d carried direct; want the session founded again", ta.SessionsAborted, ta.Fallbacks)
	}
	select {
	case r := <-srv.lines:
		t.Errorf("the server got a second request: %q", r)
	case <-time.After(time.Second):
	}
}
