package labnet

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/sosappliance/sosappliance/examples/lab/wanem"
)

// WANStats asks every WAN emulator of the lab for its counters (SIGUSR1:
// it prints them to its log) and returns them, one per emulator (two
// sites: one; three: one per site's link to the hub), in name order.
// Comparing two calls (wanem.Stats.Since) shows what a transfer cost the
// WAN, above all the frames its queue dropped: loss the transfer made
// itself, beside the random loss the WAN was set to.
func (l *Lab) WANStats(ctx context.Context) ([]wanem.Stats, error) {
	l.mu.Lock()
	var procs []*Process
	for _, name := range sortedKeys(l.procs) {
		if name == "wanem" || strings.HasPrefix(name, "wanem-") {
			procs = append(procs, l.procs[name])
		}
	}
	l.mu.Unlock()
	if len(procs) == 0 {
		return nil, fmt.Errorf("lab %s runs no WAN emulator", l.ID)
	}
	out := make([]wanem.Stats, 0, len(procs))
	for _, p := range procs {
		s, err := emulatorStats(ctx, p.Ref)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// emulatorStats signals one emulator and waits for the counters it prints;
// a log read while a dump is half written (an error to LastStats) is read
// again, for up to 5 s.
func emulatorStats(ctx context.Context, p ProcessRef) (wanem.Stats, error) {
	read := func() (wanem.Stats, int, error) {
		log, err := os.ReadFile(p.Log)
		if err != nil {
			return wanem.Stats{}, 0, err
		}
		s, printed, _, err := wanem.LastStats(string(log))
		if err != nil {
			return wanem.Stats{}, 0, fmt.Errorf("%s: %w", p.Log, err)
		}
		return s, printed, nil
	}
	_, before, err := read()
	if err != nil {
		return wanem.Stats{}, err
	}
	if !p.Alive() {
		return wanem.Stats{}, fmt.Errorf("%s (pid %d) is not running", p.Name, p.PID)
	}
	if err := p.Signal(syscall.SIGUSR1); err != nil {
		return wanem.Stats{}, err
	}
	var s wanem.Stats
	err = poll(ctx, 5*time.Second, p.Name+"'s counters in "+p.Log, func() (bool, error) {
		got, printed, err := read()
		if err != nil || printed <= before {
			return false, err
		}
		s = got
		return true, nil
	})
	return s, err
}
