package filetrust

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// otherWriter names a process of a user other than root and euid that
// holds the file st open for writing, or has it mapped shared and
// writable ("pid 1234 (uid 65534)"), or "". It reads /proc: the
// descriptors and their open flags, and the mappings, of every process
// not root's or euid's (a process's /proc directory is its owner's).
func otherWriter(st fs.FileInfo, euid uint32) string {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	dev, ino := uint64(sys.Dev), sys.Ino
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return ""
	}
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		info, err := p.Info()
		if err != nil {
			continue
		}
		uid := info.Sys().(*syscall.Stat_t).Uid
		if uid == 0 || uid == euid {
			continue
		}
		dir := filepath.Join("/proc", p.Name())
		if writesThroughFD(dir, dev, ino) || writesThroughMap(dir, dev, ino) {
			return fmt.Sprintf("pid %d (uid %d)", pid, uid)
		}
	}
	return ""
}

// writesThroughFD says whether a descriptor of the process at dir is
// open on (dev, ino) for writing.
func writesThroughFD(dir string, dev, ino uint64) bool {
	fds, err := os.ReadDir(filepath.Join(dir, "fd"))
	if err != nil {
		return false
	}
	for _, fd := range fds {
		var st unix.Stat_t
		if unix.Stat(filepath.Join(dir, "fd", fd.Name()), &st) != nil || uint64(st.Dev) != dev || st.Ino != ino {
			continue
		}
		info, err := os.ReadFile(filepath.Join(dir, "fdinfo", fd.Name()))
		if err != nil {
			return true // open on it, flags unknown: take it as a writer
		}
		for line := range strings.SplitSeq(string(info), "\n") {
			if v, ok := strings.CutPrefix(line, "flags:"); ok {
				flags, err := strconv.ParseUint(strings.TrimSpace(v), 8, 64)
				if err != nil || flags&unix.O_ACCMODE != unix.O_RDONLY {
					return true
				}
			}
		}
	}
	return false
}

// writesThroughMap says whether the process at dir maps (dev, ino)
// shared and writable.
func writesThroughMap(dir string, dev, ino uint64) bool {
	f, err := os.Open(filepath.Join(dir, "maps"))
	if err != nil {
		return false
	}
	defer f.Close()
	want := fmt.Sprintf("%02x:%02x", unix.Major(dev), unix.Minor(dev))
	s := bufio.NewScanner(f)
	for s.Scan() {
		// address perms offset dev inode path
		f := strings.Fields(s.Text())
		if len(f) < 5 || len(f[1]) < 4 || f[1][1] != 'w' || f[1][3] != 's' {
			continue
		}
		if n, err := strconv.ParseUint(f[4], 10, 64); err == nil && n == ino && f[3] == want {
			return true
		}
	}
	return false
}
