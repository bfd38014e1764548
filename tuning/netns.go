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

// RunInNamedNetns runs fn as RunInNetns does, in the namespace that
// `ip netns add NAME` created; sockets fn opens live there for good.
func RunInNamedNetns(name string, fn func() error) error {
	ns, err := netns.GetFromName(name)
	if err != nil {
		return fmt.Errorf("namespace %s: %w", name, err)
	}
	defer ns.Close()
	if err := RunInNetns(ns, fn); err != nil {
		return fmt.Errorf("namespace %s: %w", name, err)
	}
	return nil
}
