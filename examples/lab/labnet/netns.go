package labnet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sosappliance/sosappliance/tuning"
)

// run runs a command and returns its stdout; a failure carries stderr.
func run(ctx context.Context, name string, args ...string) (string, error) {
	return runEnv(ctx, nil, name, args...)
}

// runEnv is run with an environment; nil inherits the lab's.
func runEnv(ctx context.Context, env []string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// runIn runs a command inside a network namespace.
func runIn(ctx context.Context, ns, name string, args ...string) (string, error) {
	return run(ctx, "ip", append([]string{"netns", "exec", ns, name}, args...)...)
}

// netnsExists reports whether a named network namespace exists.
func netnsExists(name string) bool {
	_, err := os.Stat(filepath.Join("/var/run/netns", name))
	return err == nil
}

// listNetns returns the names of all named network namespaces.
func listNetns() ([]string, error) {
	entries, err := os.ReadDir("/var/run/netns")
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list namespaces: %w", err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names, nil
}

// netnsPids returns the pids of the processes inside a namespace.
func netnsPids(ns string) ([]int, error) {
	out, err := run(context.Background(), "ip", "netns", "pids", ns)
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(out) {
		if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// deleteNetns kills whatever still runs in the namespace (processes the
// lab lost track of, e.g. started just before a crash) and deletes it;
// deleting it removes its veths and, with them, their peers.
func deleteNetns(ns string) error {
	if !netnsExists(ns) {
		return nil
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		pids, err := netnsPids(ns)
		if err != nil || len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, sig)
		}
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) {
			if left, err := netnsPids(ns); err != nil || len(left) == 0 {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if _, err := run(context.Background(), "ip", "netns", "del", ns); err != nil && netnsExists(ns) {
		return err
	}
	return nil
}

// inNetns runs fn on an OS thread switched into the named namespace; the
// sockets fn opens live there for good.
func inNetns(ns string, fn func() error) error { return tuning.RunInNamedNetns(ns, fn) }

// poll calls ready every 50 ms until it reports true, gives up (an error
// wrapping errGaveUp), or limit runs out; it returns at once when ctx ends.
func poll(ctx context.Context, limit time.Duration, what string, ready func() (bool, error)) error {
	deadline := time.Now().Add(limit)
	for {
		ok, err := ready()
		if ok {
			return nil
		}
		if errors.Is(err, errGaveUp) {
			return fmt.Errorf("%s: %w", what, err)
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("%s: not ready after %v: %w", what, limit, err)
			}
			return fmt.Errorf("%s: not ready after %v", what, limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
