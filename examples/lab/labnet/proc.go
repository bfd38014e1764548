package labnet

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ProcessRef names a process the lab started. Start is the process's start
// time in clock ticks after boot, so that a recycled pid is never mistaken
// for it and signalled.
type ProcessRef struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	PID       int    `json:"pid"`
	Start     uint64 `json:"start"`
	Log       string `json:"log,omitempty"`
}

// Alive reports whether the process still runs (a zombie does not).
func (p ProcessRef) Alive() bool {
	start, state, err := procStat(p.PID)
	return err == nil && start == p.Start && state != 'Z' && state != 'X'
}

// Signal sends sig to the process if it is still the one that was started.
func (p ProcessRef) Signal(sig syscall.Signal) error {
	start, _, err := procStat(p.PID)
	if err != nil || start != p.Start {
		return nil
	}
	if err := syscall.Kill(p.PID, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal %s (pid %d): %w", p.Name, p.PID, err)
	}
	return nil
}

// selfRef describes the calling process.
func selfRef(name string) (ProcessRef, error) {
	start, _, err := procStat(os.Getpid())
	if err != nil {
		return ProcessRef{}, err
	}
	return ProcessRef{Name: name, PID: os.Getpid(), Start: start}, nil
}

// procStat reads a process's start time and state from /proc/PID/stat.
func procStat(pid int) (start uint64, state byte, err error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	// The command name in parentheses may hold spaces; fields are counted
	// after its closing parenthesis: state is field 3, starttime field 22.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	fields := strings.Fields(string(data[i+1:]))
	if len(fields) < 20 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fields))
	}
	start, err = strconv.ParseUint(fields[19], 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("/proc/%d/stat starttime: %w", pid, err)
	}
	return start, fields[0][0], nil
}

// stopProcess asks the process to exit with SIGTERM and kills it when it
// has not after grace.
func stopProcess(p ProcessRef, grace time.Duration) error {
	if err := p.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	if waitGone(p, grace) {
		return nil
	}
	if err := p.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	if !waitGone(p, 5*time.Second) {
		return fmt.Errorf("%s (pid %d) survived SIGKILL", p.Name, p.PID)
	}
	return nil
}

func waitGone(p ProcessRef, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for p.Alive() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// startIn starts a program inside a network namespace with `ip netns exec`,
// which also gives it the namespace's view of /sys, with stdout and stderr
// appended to logPath. The process gets its own process group so that a
// Ctrl-C at the terminal reaches only the lab, which then stops everything
// in order. A process of a lab that is not persistent is killed by the
// kernel if the lab's process dies without tearing down.
func startIn(ns, logPath string, env []string, persistent bool, name string, args ...string) (*exec.Cmd, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	defer logFile.Close()
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns, name}, args...)...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if !persistent {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s in %s: %w", name, ns, err)
	}
	return cmd, nil
}

// CPUTime is the processor time (user and system) a lab process has used
// so far, from /proc/PID/stat.
func (p ProcessRef) CPUTime() (time.Duration, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(p.PID) + "/stat")
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", p.PID)
	}
	fields := strings.Fields(string(data[i+1:]))
	if len(fields) < 20 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", p.PID, len(fields))
	}
	if start, _ := strconv.ParseUint(fields[19], 10, 64); start != p.Start {
		return 0, fmt.Errorf("%s (pid %d) is gone", p.Name, p.PID)
	}
	// utime and stime, fields 14 and 15, in clock ticks.
	var ticks uint64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", p.PID, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat times: 100 on every
// Linux architecture the lab runs on.
const clockTicks = 100
