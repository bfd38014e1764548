package relay

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/sosappliance/sosappliance/host/cpuset"
)

// pinProcess pins every thread of the process to cpus and returns a
// function that puts back the affinity the process had.
func pinProcess(cpus []int) (restore func() error, err error) {
	orig, err := threadAffinity(0)
	if err != nil {
		return nil, err
	}
	if err := pinThreads(cpus); err != nil {
		_ = pinThreads(orig)
		return nil, err
	}
	return func() error { return pinThreads(orig) }, nil
}

// pinThreads sets the CPU affinity of every thread of the calling process.
// Threads the Go runtime starts later inherit the affinity of the thread
// that creates them, so the whole process stays on cpus.
func pinThreads(cpus []int) error {
	if len(cpus) == 0 {
		return errors.New("pin process: empty CPU list")
	}
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return fmt.Errorf("pin process: %w", err)
	}
	var errs []error
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		// A thread may exit between listing and pinning.
		if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("thread %d: %w", tid, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("pin process to CPUs %s: %w", cpuset.Format(cpus), err)
	}
	return nil
}

// threadAffinity reads the CPU affinity of one thread (0: the caller).
func threadAffinity(tid int) ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(tid, &set); err != nil {
		return nil, fmt.Errorf("affinity of %d: %w", tid, err)
	}
	var cpus []int
	for c := 0; c <= cpuset.MaxCPU && len(cpus) < set.Count(); c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}
