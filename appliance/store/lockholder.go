package store

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// lockHolder finds the pid holding the flock that bbolt takes on path, so the
// operator is told which process to look at. bbolt's flock carries no owner,
// but the kernel lists every lock with its pid, device and inode in
// /proc/locks. It returns 0 when the holder cannot be found.
func lockHolder(path string) int {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0
	}
	f, err := os.Open("/proc/locks")
	if err != nil {
		return 0
	}
	defer f.Close()
	return parseLockHolder(f, st.Ino, unix.Major(st.Dev), unix.Minor(st.Dev))
}

// parseLockHolder scans /proc/locks lines such as
//
//	1: FLOCK  ADVISORY  WRITE 8542 fe:00:9978185 0 EOF
//
// for a lock on the given inode. A lock on the same inode and device wins;
// on stacked filesystems (overlayfs) the device in /proc/locks can differ
// from stat's, so a lone match on the inode is accepted too.
func parseLockHolder(r io.Reader, ino uint64, major, minor uint32) int {
	wantDev := fmt.Sprintf("%02x:%02x", major, minor)
	inodeOnly := 0
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		// Blocked waiters are listed as "1: -> FLOCK ..."; skip them.
		if len(f) < 6 || f[1] == "->" || f[1] != "FLOCK" {
			continue
		}
		pid, err := strconv.Atoi(f[4])
		if err != nil {
			continue
		}
		id := f[5]
		cut := strings.LastIndexByte(id, ':')
		if cut < 0 || id[cut+1:] != strconv.FormatUint(ino, 10) {
			continue
		}
		if id[:cut] == wantDev {
			return pid
		}
		if inodeOnly == 0 {
			inodeOnly = pid
		}
	}
	return inodeOnly
}
