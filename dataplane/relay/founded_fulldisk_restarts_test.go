package relay

// Every record that returned nil is read back, through full disks and
// restarts, made for real in a tmpfs of a private mount namespace.
//
// Found and written by review (helper-94).

import (
	"encoding/binary"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/dataplane/stripe"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestFoundedRecordedIsReadBackThroughFullDisksAndRestarts (held): 60
// rounds of records with room, then on a full filesystem (records until one is cut
// short, at another offset each round), with agents restarting while it is full
// (appending to the file as found) or after: each id whose record
// returned nil is read back by an agent starting at the end.
func TestFoundedRecordedIsReadBackThroughFullDisksAndRestarts(t *testing.T) {
	if !testsupport.InPrivateMounts(t) {
		return
	}
	dir := testsupport.Tmpfs(t, "256k")
	path := filepath.Join(dir, "founded-agent-b")
	rng := rand.New(rand.NewPCG(94, 94))
	t0 := time.Now().Add(-time.Minute)
	at := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	n := 0
	next := func() stripe.SessionID {
		var id stripe.SessionID
		binary.BigEndian.PutUint64(id[:], uint64(n)+1)
		n++
		return id
	}
	var kept []stripe.SessionID
	var failed int
	ff := mustOpenFounded(t, path, at(0))
	record := func() bool {
		id := next()
		if err := ff.record(id, at(n)); err != nil {
			failed++
			return false
		}
		kept = append(kept, id)
		return true
	}
	for round := range 60 {
		for range rng.IntN(40) {
			record()
		}
		free := testsupport.FillFS(t, dir, 0)
		// Until the file's last page is full and a record is cut.
		for i := 0; i < 100 && record(); i++ {
		}
		for range rng.IntN(3) {
			record()
		}
		if rng.IntN(3) == 0 {
			ff.close()
			ff = mustOpenFounded(t, path, at(n))
			for range 1 + rng.IntN(3) {
				record()
			}
		}
		free()
		record()
		if round%7 == 0 {
			ff.close()
			ff = mustOpenFounded(t, path, at(n))
		}
	}
	ff.close()
	ids, bad := readBack(t, path, at(n+1))
	t.Logf("%d records returned nil, %d failed; %d ids read back, %d lines skipped", len(kept), failed, len(ids), bad)
	if failed == 0 {
		t.Fatal("no record failed: the test did not make ENOSPC")
	}
	for _, id := range kept {
		if !idsHold(ids, id) {
			t.Errorf("session %x: its record returned nil but a restarted agent does not read it back", id[:8])
		}
	}
}
