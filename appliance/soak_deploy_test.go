package appliance

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// soakInotifyWatches counts the inotify watches this process holds
// (the daemon's config watcher is its only inotify user).
func soakInotifyWatches(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fdinfo")
	testsupport.RequireNoError(t, err)
	n := 0
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc/self/fdinfo", e.Name()))
		if err != nil {
			continue
		}
		n += strings.Count(string(b), "inotify wd:")
	}
	return n
}

// TestSoakConfigDeploys: 100 deploys of the file in each way
// config management makes them: a rename over the file; a new release
// directory and a "current" symlink swapped to it, the old releases kept
// or deleted. Descriptors, goroutines and inotify watches stay flat.
func TestSoakConfigDeploys(t *testing.T) {
	t.Parallel() // counts in a child process of its own
	if !testsupport.InFreshNetns(t) {
		return
	}
	for _, tc := range []struct {
		name string
		keep bool // old release directories are kept
		link bool // a "current" symlink to a release directory
	}{
		{"rename over the file", false, false},
		{"release directories, old ones deleted", false, true},
		{"release directories, old ones kept", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, dir := tempHost(t), t.TempDir()
			releases := filepath.Join(dir, "releases")
			testsupport.RequireNoError(t, os.MkdirAll(releases, 0o755))
			current := filepath.Join(dir, "current")
			cfgPath := filepath.Join(dir, "sos.hcl")
			release := func(i int) string { return filepath.Join(releases, fmt.Sprint(i)) }
			deploy := func(i int, content string) {
				if !tc.link {
					writeFile(t, cfgPath+".new", content)
					testsupport.RequireNoError(t, os.Rename(cfgPath+".new", cfgPath))
					return
				}
				testsupport.RequireNoError(t, os.MkdirAll(release(i), 0o755))
				writeFile(t, filepath.Join(release(i), "sos.hcl"), content)
				testsupport.RequireNoError(t, os.Symlink(release(i), current+".new"))
				testsupport.RequireNoError(t, os.Rename(current+".new", current))
				if !tc.keep && i > 0 {
					testsupport.RequireNoError(t, os.RemoveAll(release(i-1)))
				}
			}
			deploy(0, daemonConfig("100000"))
			if tc.link {
				testsupport.RequireNoError(t, os.Symlink(filepath.Join("current", "sos.hcl"), cfgPath))
			}
			td := startDaemon(t, root, dir, cfgPath, time.Hour)
			td.waitFor("initial convergence", func() bool { return td.sysctl("net.core.rmem_max") == "100000" })
			cycle := func(i int) {
				want := fmt.Sprint(200000 + i)
				deploy(i+1, daemonConfig(want))
				td.waitFor("deploy "+want+" applied", func() bool { return td.sysctl("net.core.rmem_max") == want })
			}
			for i := range soakWarm {
				cycle(i)
			}
			before := soakInotifyWatches(t)
			// soak measures descriptors and goroutines over the same
			// kind of cycles.
			soak(t, tc.name, func(i int) { cycle(soakWarm + i) })
			after := soakInotifyWatches(t)
			t.Logf("%s: inotify watches %d -> %d", tc.name, before, after)
			if after-before > soakSlack {
				t.Errorf("%s: %d more inotify watches after %d more deploys (%d -> %d); fs.inotify.max_user_watches is shared by every process of root",
					tc.name, after-before, soakWarm+soakCycles, before, after)
			}
		})
	}
}
