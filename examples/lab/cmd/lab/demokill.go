package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/sosappliance/sosappliance/examples/lab/labnet"
)

// killEvery is how often `lab demo --kill-streams N` kills N stripes.
const killEvery = 2 * time.Second

// startKilling kills n of agent-a's stripes every killEvery until the
// returned stop is called, which reports what the agents did about it.
// n = 0 does nothing.
func startKilling(ctx context.Context, lab *labnet.Lab, n int, stdout io.Writer) (stop func()) {
	if n <= 0 || !lab.Appliance() {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var mu sync.Mutex
	killed, bursts := 0, 0
	var lastErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(killEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			k, err := lab.KillStreams(ctx, n)
			mu.Lock()
			killed += k
			bursts++
			if err != nil && ctx.Err() == nil {
				lastErr = err
			}
			mu.Unlock()
		}
	}()
	return func() {
		cancel()
		wg.Wait()
		fmt.Fprintf(stdout, "\nstream kills: %d stripes killed with ss -K on agent-a in %d bursts of up to %d\n", killed, bursts, n)
		if lastErr != nil {
			fmt.Fprintf(stdout, "  last kill failed: %v\n", lastErr)
		}
		for _, node := range []string{"lab-agent-a", "lab-agent-b"} {
			ls, err := lab.LostStreams(context.Background(), node)
			if err != nil {
				fmt.Fprintf(stdout, "  %s: %v\n", node, err)
				continue
			}
			fmt.Fprintf(stdout, "  %s: %s\n", node, ls)
		}
	}
}
