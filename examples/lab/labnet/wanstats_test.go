package labnet

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/examples/lab/wanem"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestEmulatorStatsWaitsOutADumpBeingWritten: an emulator whose log is
// read while it writes a dump (its second line cut in its name, which
// LastStats calls an error) is read again until the dump is whole, and
// the new dump is returned, not the one before it nor the error. The
// emulator is a shell that prints one dump the way wanem does, on
// SIGUSR1, with a pause inside its second line.
func TestEmulatorStatsWaitsOutADumpBeingWritten(t *testing.T) {
	one := wanem.Stats{AtoBName: "wan-a->wan-b", BtoAName: "wan-b->wan-a", AtoB: wanem.LinkStats{ReceivedPackets: 1}, BtoA: wanem.LinkStats{ReceivedPackets: 2}}
	two := one
	two.AtoB.ReceivedPackets, two.BtoA.ReceivedPackets = 30, 40
	aLine, bLine, _ := strings.Cut(two.String(), "\n")
	log := filepath.Join(t.TempDir(), "wanem.log")
	if err := os.WriteFile(log, []byte(wanem.JoiningLine("wan-a", "wan-b", wanem.Shape{})+"\n"+one.String()+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The loop ends by itself after 10 s; the test kills it before.
	script := `trap 'printf "%s\n%s" "$A" "$B1" >>"$LOG"; sleep 0.3; printf "%s\n" "$B2" >>"$LOG"' USR1
echo ready >>"$LOG"
i=0; while [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done`
	cmd := exec.Command("sh", "-c", script)
	cmd.Env = append(os.Environ(), "LOG="+log, "A="+aLine, "B1="+bLine[:len("dir=wan-b->w")], "B2="+bLine[len("dir=wan-b->w"):])
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	testsupport.Eventually(t, 5*time.Second, "the shell's trap", func() bool {
		b, _ := os.ReadFile(log)
		return strings.Contains(string(b), "ready")
	})
	start, _, err := procStat(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	ref := ProcessRef{Name: "wanem", PID: cmd.Process.Pid, Start: start, Log: log}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := emulatorStats(ctx, ref)
	if err != nil || got != two {
		t.Fatalf("emulatorStats = %+v, %v; want the new dump %+v", got, err, two)
	}
	// What the reader finds during the pause is an error to LastStats,
	// so the call above did wait one out.
	b, _ := os.ReadFile(log)
	if _, _, _, err := wanem.LastStats(string(b) + aLine + "\ndir=wan-b->w"); err == nil {
		t.Errorf("LastStats took a cut second line without an error; the test no longer checks a retry")
	}
}
