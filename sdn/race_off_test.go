//go:build !race

package sdn

// raceEnabled: see race_on_test.go.
const raceEnabled = false
