package appliance

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestReloadAfterConfigDirReplaced: config management that replaces the
// whole directory holding sos.hcl (rm -rf and unpack, or rename a staged
// directory into place). Before, the watcher kept watching the old
// directory's inode and took its path as watched, so it never added the
// new directory: the swap itself was taken, but no edit after it, until
// a SIGHUP, and nothing said so. Now it watches each directory's parent
// too and watches a directory again when another stands at its path.
// Found by review (helper-58).
func TestReloadAfterConfigDirReplaced(t *testing.T) {
	for _, how := range []string{"rename", "remove"} {
		t.Run(how, func(t *testing.T) {
			root, dir := tempHost(t), t.TempDir()
			etc := filepath.Join(dir, "etc")
			if err := os.Mkdir(etc, 0o755); err != nil {
				t.Fatal(err)
			}
			cfgPath := filepath.Join(etc, "sos.hcl")
			writeFile(t, cfgPath, daemonConfig("100000"))
			td := startDaemon(t, root, dir, cfgPath, time.Hour)
			td.waitFor("initial convergence", func() bool { return td.sysctl("net.core.rmem_max") == "100000" })

			switch how {
			case "rename":
				staged := filepath.Join(dir, "etc.new")
				if err := os.Mkdir(staged, 0o755); err != nil {
					t.Fatal(err)
				}
				writeFile(t, filepath.Join(staged, "sos.hcl"), daemonConfig("200000"))
				if err := os.Rename(etc, filepath.Join(dir, "etc.old")); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(staged, etc); err != nil {
					t.Fatal(err)
				}
			case "remove":
				if err := os.RemoveAll(etc); err != nil {
					t.Fatal(err)
				}
				if err := os.Mkdir(etc, 0o755); err != nil {
					t.Fatal(err)
				}
				writeFile(t, cfgPath, daemonConfig("200000"))
			}
			td.waitFor("the swapped directory's file applied", func() bool { return td.sysctl("net.core.rmem_max") == "200000" })

			// An ordinary edit in the new directory afterwards.
			writeFile(t, cfgPath, daemonConfig("300000"))
			td.waitFor("an edit in the new directory applied", func() bool { return td.sysctl("net.core.rmem_max") == "300000" })
		})
	}
}

// TestReloadOfHalfWrittenFile: a file truncated and written in two parts
// with a pause (a slow writer, a full disk) is refused while half
// written, with the position in status; the old config keeps running;
// the completed file is taken. So is an empty file, and a file deleted
// and written again. Written by review (helper-58); it passed.
func TestReloadOfHalfWrittenFile(t *testing.T) {
	root, dir := tempHost(t), t.TempDir()
	cfgPath := filepath.Join(dir, "sos.hcl")
	writeFile(t, cfgPath, daemonConfig("100000"))
	td := startDaemon(t, root, dir, cfgPath, time.Hour)
	td.waitFor("initial convergence", func() bool { return td.sysctl("net.core.rmem_max") == "100000" })
	pos := regexp.MustCompile(`sos\.hcl:\d+:\d+: `)

	full := daemonConfig("200000")
	writeFile(t, cfgPath, full[:len(full)/2])
	td.waitFor("the half-written file refused", func() bool { return td.status().ReloadFails == 1 })
	st := td.status()
	if td.sysctl("net.core.rmem_max") != "100000" || len(st.LastReload.Problems) == 0 || !pos.MatchString(st.LastReload.Problems[0]) {
		t.Errorf("half-written file: rmem_max %s, last reload %+v", td.sysctl("net.core.rmem_max"), st.LastReload)
	}
	writeFile(t, cfgPath, full)
	td.waitFor("the completed file applied", func() bool { return td.sysctl("net.core.rmem_max") == "200000" })

	writeFile(t, cfgPath, "")
	td.waitFor("the empty file refused", func() bool { return td.status().ReloadFails == 2 })
	st = td.status()
	if len(st.LastReload.Problems) == 0 || !strings.Contains(st.LastReload.Problems[0], "empty") {
		t.Errorf("empty file: %+v", st.LastReload)
	}
	if err := os.Remove(cfgPath); err != nil {
		t.Fatal(err)
	}
	writeFile(t, cfgPath, daemonConfig("300000"))
	td.waitFor("the recreated file applied", func() bool { return td.sysctl("net.core.rmem_max") == "300000" })
	if r := td.status().LastReload; r == nil || r.Result != "ok" {
		t.Errorf("after the good edit: %+v", r)
	}
}
