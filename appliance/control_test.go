package appliance

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestControlSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", "control.sock")
	want := Status{Node: "agent-a", Serial: 7, ConfigHash: "abc", Sessions: []SessionStatus{{Client: "10.0.0.1:1234", Streams: 64}}}
	cs, err := ListenControl(path, func() Status { return want })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })

	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := st.Mode().Perm(); perm != 0o600 {
		t.Errorf("socket mode %o, want 600", perm)
	}
	if _, err := ListenControl(path, func() Status { return Status{} }); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("second daemon took over a live socket: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got, err := FetchStatus(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if got.Node != want.Node || got.Serial != 7 || len(got.Sessions) != 1 || got.Sessions[0].Streams != 64 {
		t.Errorf("status = %+v", got)
	}
	var b bytes.Buffer
	got.WriteText(&b)
	for _, s := range []string{"agent-a", "state serial:", "sessions: 1", "10.0.0.1:1234"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("text status lacks %q:\n%s", s, b.String())
		}
	}

	cs.Close()
	if _, err := FetchStatus(ctx, path); err == nil || !strings.Contains(err.Error(), "no daemon answers") {
		t.Errorf("closed socket: %v", err)
	}
	// A stale socket file left by a crashed daemon is replaced.
	os.WriteFile(path, nil, 0o600)
	cs2, err := ListenControl(path, func() Status { return want })
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	cs2.Close()
}
