package sdn_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/sdn"
	"github.com/sosappliance/sosappliance/sdn/flows"
	"github.com/sosappliance/sosappliance/sdn/ovstest"
)

// TestShrunkRangeConfigConverges: a bridge carries the 45,000 owned flows
// of 15,000 whitelists with port ranges (rangeSwitch, the scale of
// BenchmarkConverge10kRanges), and the configuration shrinks to one
// whitelist. The flow dump is bounded by FlowReplyLimit(len(desired)),
// which counts what the entries take decoded (replyCost). At 1,024 bytes
// an entry (be7cf6e) the dump of the 45,000 stale flows passed it, the
// session was cut off and reconnected for ever, and the stale flows
// stayed; 2,048 keeps the margin 512 bytes on the wire gave. Found by
// review (helper-54).
func TestShrunkRangeConfigConverges(t *testing.T) {
	t.Parallel() // its own controller (and Open vSwitch, in a namespace of its own); mostly waiting (see the Makefile's -parallel)
	ovstest.Require(t, ovstest.Binaries...)
	inst := ovstest.Start(t)
	port := inst.FreePort(t)
	big := rangeSwitch(0x5e55, 15000)
	old, err := flows.Compile(big)
	if err != nil {
		t.Fatal(err)
	}
	br := inst.AddBridge(t, "brsh", big.DatapathID, fmt.Sprintf("ptcp:%d:127.0.0.1", port))
	var text strings.Builder
	for _, f := range old {
		text.WriteString(f.String() + "\n")
	}
	file := filepath.Join(t.TempDir(), "flows.txt")
	if err := os.WriteFile(file, []byte(text.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := br.Ofctl("add-flows", file); err != nil {
		t.Fatalf("add-flows: %v %s", err, out)
	}
	small := rangeSwitch(0x5e55, 1)
	small.Connect = fmt.Sprintf("tcp:127.0.0.1:%d", port)
	desired, err := flows.Compile(small)
	if err != nil {
		t.Fatal(err)
	}
	lim := sdn.FlowReplyLimit(len(desired))
	t.Logf("the bridge carries %d owned flows; the shrunk configuration wants %d; the dump limit is %d parts, %d bytes",
		len(old), len(desired), lim.Parts, lim.Bytes)
	ctl := startController(t, sdn.Config{Dial: inst.DialContext, ResyncInterval: -1, Switches: []flows.Switch{small}})
	start := time.Now()
	ok := testsupport.Poll(60*time.Second, func() bool {
		st := switchStatus(ctl.Controller, small.Name)
		return st.LastChanges >= len(old)-len(desired) && st.LastError == ""
	})
	st := switchStatus(ctl.Controller, small.Name)
	t.Logf("after %v: connected %v, %d convergences, last changes %d, last error %q; connections %d, convergence failures %d, owned flows on the bridge %d",
		time.Since(start).Round(time.Millisecond), st.Connected, st.Converges, st.LastChanges, st.LastError,
		ctl.Status().Counters.Connections, ctl.Status().Counters.ConvergeFailures, ownedFlowCount(t, br))
	for _, l := range strings.Split(ctl.logs.String(), "\n") {
		if strings.Contains(l, "exceeds its limit") {
			t.Logf("first disconnect: %s", l)
			break
		}
	}
	if !ok {
		t.Errorf("the shrunk configuration did not converge within 60 s")
	}
}
