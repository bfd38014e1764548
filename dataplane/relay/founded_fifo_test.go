package relay

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A FIFO at the founded sessions file's path, or its previous
// generation's, held the agent's start for good: a read-only open of one
// waits for a writer. The start now fails at once, naming the file.
func TestFoundedFileFIFORefusedAtOnce(t *testing.T) {
	for _, which := range []string{"current", "old"} {
		t.Run(which, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "founded-a")
			fifo := path
			if which == "old" {
				fifo = foundedOld(path)
			}
			if err := syscall.Mkfifo(fifo, 0o600); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				ff, _, _, err := openFounded(path, time.Now())
				if err == nil {
					ff.close()
				}
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), fifo) || !strings.Contains(err.Error(), "not a regular file") {
					t.Errorf("openFounded with a FIFO at %s: %v, want an error naming it", fifo, err)
				}
			case <-time.After(20 * time.Second):
				if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
					w.Close()
				}
				t.Fatalf("openFounded with a FIFO at %s: still blocked after 20 s", fifo)
			}
			if fi, err := os.Lstat(fifo); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
				t.Errorf("the FIFO at %s was replaced: %v %v", fifo, fi, err)
			}
		})
	}
}
