package testsupport

import (
	"os/exec"
	"strings"
	"testing"
)

// Daemon is a child process that runs in the background while the test
// talks to it, signals it or kills it.
type Daemon struct {
	Cmd *exec.Cmd
	// Output collects what the child writes to stdout and stderr, except
	// where the command came with a writer of its own.
	Output *LockedBuffer

	done chan struct{}
	err  error
}

// StartDaemon starts cmd. When the test ends it kills the child if it still
// runs, waits for it, and logs its output if the test failed.
func StartDaemon(t testing.TB, cmd *exec.Cmd) *Daemon {
	t.Helper()
	d := &Daemon{Cmd: cmd, Output: &LockedBuffer{}, done: make(chan struct{})}
	if cmd.Stdout == nil {
		cmd.Stdout = d.Output
	}
	if cmd.Stderr == nil {
		cmd.Stderr = d.Output
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", strings.Join(cmd.Args, " "), err)
	}
	go func() {
		d.err = cmd.Wait()
		close(d.done)
	}()
	t.Cleanup(func() {
		d.Kill()
		if out := d.Output.String(); t.Failed() && out != "" {
			t.Logf("output of child %d:\n%s", cmd.Process.Pid, out)
		}
	})
	return d
}

// Done is closed when the child has exited and its output is collected.
func (d *Daemon) Done() <-chan struct{} { return d.done }

// Err is how the child exited (exec.Cmd.Wait's error), once Done is closed.
func (d *Daemon) Err() error {
	<-d.done
	return d.err
}

// Kill kills the child with SIGKILL unless it has exited, and waits for it.
func (d *Daemon) Kill() {
	select {
	case <-d.done:
		return
	default:
	}
	_ = d.Cmd.Process.Kill()
	<-d.done
}
