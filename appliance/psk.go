package appliance

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// minPSK is the shortest key the agents accept: 128 bits.
const minPSK = 16

// maxPSKFile bounds what LoadPSK reads: a key is 65 bytes, and a psk_file
// pointed at a log or a device must not be read whole.
const maxPSKFile = 4096

// LoadPSK reads the pre-shared key file. The packages write 64 hex digits
// and a newline (32 random bytes); a file of raw bytes of at least 16 bytes
// is accepted too.
//
// Anyone who reads or replaces the key can join and inject into sessions,
// so the file must be a regular file owned by root or by the daemon's user
// (the euid) and readable by its owner only. A symlink is followed: the file
// it points to is the one opened, checked and read (through one descriptor,
// so a swap between check and read does not help), and the link itself must
// have a trusted owner too, since in a sticky directory such as /tmp its
// owner can replace it. Directories above the file are not checked.
func LoadPSK(path string) ([]byte, error) {
	link, err := os.Lstat(path)
	if err != nil {
		return nil, fmt.Errorf("psk_file: %w", err)
	}
	name, target := path, path // how errors call the file read, and its own path
	if link.Mode()&fs.ModeSymlink != 0 {
		if err := checkPSKOwner(path, path, "symlink", link); err != nil {
			return nil, err
		}
		if t, err := filepath.EvalSymlinks(path); err == nil {
			name, target = fmt.Sprintf("%s (a symlink to %s)", path, t), t
		}
	}
	// O_NONBLOCK so that a FIFO does not block the open before it is
	// refused below; it changes nothing for a regular file.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, fmt.Errorf("psk_file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("psk_file: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("psk_file %s is not a regular file (%s)", name, st.Mode().Type())
	}
	if err := checkPSKOwner(name, target, "file", st); err != nil {
		return nil, err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("psk_file %s is mode %04o; make it readable by its owner only (chmod 600)", name, st.Mode().Perm())
	}
	raw, err := io.ReadAll(io.LimitReader(f, maxPSKFile+1))
	if err != nil {
		return nil, fmt.Errorf("psk_file %s: %w", name, err)
	}
	if len(raw) > maxPSKFile {
		return nil, fmt.Errorf("psk_file %s is larger than %d bytes; a key is 64 hex digits", name, maxPSKFile)
	}
	text := bytes.TrimSpace(raw)
	if len(text)%2 == 0 && len(text) >= 2*minPSK {
		if key, err := hex.DecodeString(string(text)); err == nil {
			return key, nil
		}
	}
	if len(raw) < minPSK {
		return nil, fmt.Errorf("psk_file %s holds %d bytes; it needs at least %d (the packages generate 32 random bytes as hex)", path, len(raw), minPSK)
	}
	return raw, nil
}

// checkPSKOwner refuses a key file, or a symlink to one, that neither root
// nor the daemon's user owns: its owner could read or rewrite the key. name
// is the file as errors call it, target what the fix should chown.
func checkPSKOwner(name, target, what string, fi fs.FileInfo) error {
	sys, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("psk_file %s: cannot read the owner of the %s", name, what)
	}
	euid := os.Geteuid()
	if sys.Uid == 0 || int(sys.Uid) == euid {
		return nil
	}
	want := "root (uid 0), which runs the daemon"
	if euid != 0 {
		want = fmt.Sprintf("root (uid 0) or uid %d, which runs the daemon", euid)
	}
	fix := "chown root:root " + target
	if what == "symlink" {
		fix = "chown -h root:root " + target
	}
	return fmt.Errorf("psk_file %s: the %s is owned by uid %d; it must be owned by %s (%s)", name, what, sys.Uid, want, fix)
}
