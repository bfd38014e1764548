package testsupport

import (
	"testing"
	"time"
)

// maxPollInterval bounds the back-off between two checks: short enough not
// to slow a test down, long enough not to busy a small machine with checks
// that start programs.
const maxPollInterval = 100 * time.Millisecond

// Eventually checks cond until it holds, and fails the test if it does not
// within timeout. The timeout only keeps a broken test from hanging: the
// time cond took is logged, never asserted.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	start := time.Now()
	if !Poll(timeout, cond) {
		t.Fatalf("%s: not within %v", what, timeout)
	}
	t.Logf("%s after %v", what, time.Since(start).Round(time.Millisecond))
}

// Poll checks cond until it holds or timeout has passed, and reports
// whether it held: for a test that says more than Eventually on failure.
func Poll(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, maxPollInterval) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(wait)
	}
}
