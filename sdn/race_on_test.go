//go:build race

package sdn

// raceEnabled: the tests run under the race detector, whose runtime turns
// the tiny allocator off (each allocation under 16 bytes without pointers
// takes a block of its own), so heap figures are not a production
// build's.
const raceEnabled = true
