package labnet

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
	"syscall"
	"time"
)

// Process is a program the lab runs in the background inside a host: a
// daemon, the emulator, Open vSwitch, an iperf3 server.
type Process struct {
	Ref ProcessRef

	lab  *Lab
	cmd  *exec.Cmd
	done chan struct{}
}

// Start runs a program in the background inside a host's namespace. The
// lab records it, so Down stops it if the caller does not; its output goes
// to logs/NAME.log in the lab directory. Names are unique within a lab.
func (l *Lab) Start(name string, h Host, prog string, args ...string) (*Process, error) {
	return l.start(name, h, nil, prog, args...)
}

// start runs prog in h with env (nil: the lab's own environment).
func (l *Lab) start(name string, h Host, env []string, prog string, args ...string) (*Process, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if old, ok := l.procs[name]; ok && old.Ref.Alive() {
		return nil, fmt.Errorf("start %s: already running (pid %d)", name, old.Ref.PID)
	}
	logPath := filepath.Join(l.LogDir(), name+".log")
	cmd, err := startIn(l.Namespace(h), logPath, env, l.opts.Persistent, prog, args...)
	if err != nil {
		return nil, err
	}
	start, _, err := procStat(cmd.Process.Pid)
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{
		Ref:  ProcessRef{Name: name, Namespace: l.Namespace(h), PID: cmd.Process.Pid, Start: start, Log: logPath},
		lab:  l,
		cmd:  cmd,
		done: make(chan struct{}),
	}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	if err := l.ledger.addProcess(p.Ref); err != nil {
		_ = cmd.Process.Kill()
		<-p.done
		return nil, err
	}
	l.procs[name] = p
	return p, nil
}

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Stop ends the process with SIGTERM (SIGKILL after grace) and forgets it.
func (p *Process) Stop(grace time.Duration) error {
	err := stopProcess(p.Ref, grace)
	p.reap()
	return p.forget(err)
}

// Kill ends the process at once with SIGKILL, as a crash would, and forgets
// it.
func (p *Process) Kill() error {
	err := p.Ref.Signal(syscall.SIGKILL)
	p.reap()
	return p.forget(err)
}

func (p *Process) forget(err error) error {
	p.lab.mu.Lock()
	if p.lab.procs[p.Ref.Name] == p {
		delete(p.lab.procs, p.Ref.Name)
	}
	p.lab.mu.Unlock()
	if lerr := p.lab.ledger.removeProcess(p.Ref); err == nil {
		err = lerr
	}
	return err
}

// reap waits (boundedly) for the exit status to be collected, so no zombie
// outlives the lab.
func (p *Process) reap() {
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
	}
}

// Process returns the running process of that name, or nil.
func (l *Lab) Process(name string) *Process {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.procs[name]
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
