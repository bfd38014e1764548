package lab_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/examples/lab/labnet"
)

// testDownloadSurvivesStreamKills fetches the 1 GiB file with curl while
// bursts of stripe kills (ss -K on agent-a) hit the session: curl must get
// every byte (sha256), and the agents must report lost, replaced and
// reinjected streams.
func testDownloadSurvivesStreamKills(ctx context.Context, t *testing.T, lab *labnet.Lab, files *fileServer) {
	before := lostStreams(ctx, t, lab)
	seen := files.watch("/big")
	cmd := lab.Command(ctx, labnet.Client, "curl", "-sS", "--fail", "-o", "-",
		fmt.Sprintf("http://%s:%d/big", labnet.ServerAddr, httpPort))
	sum := sha256.New()
	var n countWriter
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.MultiWriter(sum, &n), &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-seen:
	case err := <-done:
		t.Fatalf("curl ended before the server saw the request: %v: %s", err, stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatal("the server saw no request within 30 s")
	}
	killed := 0
	for burst := 0; burst < 4; burst++ {
		time.Sleep(time.Second)
		k, err := lab.KillStreams(ctx, 32)
		if err != nil {
			t.Fatal(err)
		}
		killed += k
	}
	if err := <-done; err != nil {
		t.Fatalf("curl under stream kills: %v: %s", err, stderr.String())
	}
	if int64(n) != bigSize {
		t.Fatalf("downloaded %d bytes, want %d", n, bigSize)
	}
	if got := hex.EncodeToString(sum.Sum(nil)); got != files.bigSum {
		t.Fatalf("sha256 %s, want %s", got, files.bigSum)
	}
	after := lostStreams(ctx, t, lab)
	t.Logf("1 GiB byte-identical through %d stripe kills; agent-a: %s; agent-b: %s", killed, after[0], after[1])
	if killed == 0 {
		t.Fatal("no stripe was killed: the download was over too soon")
	}
	if after[0].Lost == before[0].Lost || after[0].Replaced == before[0].Replaced {
		t.Errorf("agent-a counted no lost or replaced stream: %s", after[0])
	}
	if after[1].ReinjectedBytes == before[1].ReinjectedBytes && after[0].ReinjectedBytes == before[0].ReinjectedBytes {
		t.Errorf("no bytes reinjected: agent-a %s, agent-b %s", after[0], after[1])
	}
}

func lostStreams(ctx context.Context, t *testing.T, lab *labnet.Lab) [2]labnet.LostStreams {
	t.Helper()
	var out [2]labnet.LostStreams
	for i, node := range []string{"lab-agent-a", "lab-agent-b"} {
		ls, err := lab.LostStreams(ctx, node)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = ls
	}
	return out
}
