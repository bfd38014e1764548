package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCopyLogsCopiesTheLabsLogsOnly(t *testing.T) {
	src, out := t.TempDir(), t.TempDir()
	files := map[string]string{
		"lab-agent-a.log": "time=1 msg=\"relay: pacing start-up over\" whitelist=bench-s8-c60000\n",
		"lab-ctl.log":     "time=2 msg=started\n",
		"sos.hcl":         "not a log",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(src, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dst := filepath.Join(out, "logs")
	n, err := copyLogs(src, dst)
	if err != nil || n != 2 {
		t.Fatalf("copyLogs = %d, %v; want 2 logs copied", n, err)
	}
	for name, text := range files {
		got, err := os.ReadFile(filepath.Join(dst, name))
		if strings.HasSuffix(name, ".log") {
			if err != nil || string(got) != text {
				t.Errorf("%s: copied %q (%v), want %q", name, got, err, text)
			}
		} else if err == nil {
			t.Errorf("%s copied, want logs only", name)
		}
	}
	// A lab without logs is an error that names the directory.
	empty := t.TempDir()
	if n, err := copyLogs(empty, filepath.Join(out, "none")); err == nil || n != 0 || !strings.Contains(err.Error(), empty) {
		t.Errorf("copyLogs of an empty directory = %d, %v; want an error naming %s", n, err, empty)
	}
}
