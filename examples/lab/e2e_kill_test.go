package lab_test

import (
	"context"
	"fmt"
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
	d := startDownload(ctx, t, lab, labnet.Client, files, "-o", "-", fmt.Sprintf("http://%s:%d/big", labnet.ServerAddr, httpPort))
	killed := 0
	for burst := 0; burst < 4; burst++ {
		time.Sleep(time.Second)
		k, err := lab.KillStreams(ctx, 32)
		if err != nil {
			t.Fatal(err)
		}
		killed += k
	}
	if err := d.wait(); err != nil {
		t.Fatalf("curl under stream kills: %v", err)
	}
	d.requireBig(t, files)
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
