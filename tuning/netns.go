package tuning

import (
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
)

// RunInNetns runs fn on an OS thread switched into the network namespace
// ns, for the executors that act in the calling thread's namespace
// (interface, steering, and sysctl's /proc/sys/net). The thread is never
// handed back to the Go scheduler: it exits with fn's goroutine, so no other
// goroutine can end up running in ns by accident.
func RunInNetns(ns netns.NsHandle, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// Deliberately no UnlockOSThread: see above.
		if err := netns.Set(ns); err != nil {
			errc <- fmt.Errorf("enter network namespace: %w", err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// RunInNamedNetns runs fn on an OS thread switched into the namespace that
// `ip netns add NAME` created; sockets fn opens live there for good. Unlike
// RunInNetns the thread goes back to its own namespace and to the scheduler
// afterwards, because callers start processes from it with Pdeathsig, which
// fires when the starting thread exits. A thread that cannot go back stays
// locked, so the runtime retires it rather than run other goroutines in the
// wrong namespace.
func RunInNamedNetns(name string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		target, err := netns.GetFromName(name)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("namespace %s: %w", name, err)
			return
		}
		defer target.Close()
		if err := netns.Set(target); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter namespace %s: %w", name, err)
			return
		}
		ferr := fn()
		if err := netns.Set(orig); err == nil {
			runtime.UnlockOSThread()
		}
		errc <- ferr
	}()
	return <-errc
}
