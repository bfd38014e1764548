// Package filetrust checks that a file sosappliance acts on as root (the
// config, a saved plan, the state database) can be changed only by root
// or by the user sosappliance runs as. Whoever can write sos.hcl chooses
// what the node writes to its kernel (any sysctl, kernel.core_pattern
// included); whoever can write a saved plan or the state database
// chooses what apply and rollback write. So a file, or a directory on the
// way to it, that another user can write is refused, as sudo refuses
// such a sudoers and sshd (StrictModes) such an authorized_keys:
//
//   - the file and every directory above it must be owned by root or by
//     the effective user;
//   - none may be writable by every user, nor by a group other than
//     root's (gid 0), nor by another user or group through a POSIX ACL
//     (whose mask the mode's group bits then are: a 0664 file of root's
//     can be another user's to write);
//   - a directory writable by others is allowed when its sticky bit is
//     set (/tmp): others can then neither remove nor rename the file.
//
// The file's own checks (regular, size, its content) are its reader's.
package filetrust

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// Check returns an error naming the first file or directory on the way to
// path that a user other than root and the effective user could change,
// and the command that fixes it. what names the file in the error
// ("config file", "plan file"). Of a path that does not exist yet (a
// state database to be made) the directories that do are checked; that
// it is missing is its reader's to report.
func Check(what, path string) error {
	euid := uint32(os.Geteuid())
	st, err := os.Stat(path)
	switch {
	case err == nil:
		if err := checkOne(what, path, path, st, euid, false); err != nil {
			return err
		}
	case !os.IsNotExist(err):
		return fmt.Errorf("%s %s: %w", what, path, err)
	}
	// The directories that hold the file as named (a symlink's own
	// directory decides who can point it elsewhere) and as resolved.
	dirs := []string{filepath.Dir(absolute(path))}
	if real, err := filepath.EvalSymlinks(path); err == nil {
		dirs = append(dirs, filepath.Dir(real))
	} else if real, err := filepath.EvalSymlinks(filepath.Dir(path)); err == nil {
		// /dev/fd/63 of `-c <(...)` resolves to "pipe:[N]".
		dirs = append(dirs, real)
	}
	seen := map[string]bool{}
	for _, dir := range dirs {
		for d := dir; ; d = filepath.Dir(d) {
			if seen[d] {
				break
			}
			seen[d] = true
			dst, err := os.Stat(d)
			if os.IsNotExist(err) && d != filepath.Dir(d) {
				continue // made later, by the one who checks
			}
			if err != nil {
				return fmt.Errorf("%s %s: %w", what, path, err)
			}
			if err := checkOne(what, path, d, dst, euid, true); err != nil {
				return err
			}
			if d == filepath.Dir(d) {
				break
			}
		}
	}
	return nil
}

func absolute(path string) string {
	if a, err := filepath.Abs(path); err == nil {
		return a
	}
	return path
}

// checkOne checks one file or directory (name) on the way to path.
func checkOne(what, path, name string, st fs.FileInfo, euid uint32, dir bool) error {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s %s: cannot read the owner of %s", what, path, name)
	}
	subject := fmt.Sprintf("%s %s", what, path)
	if name != path {
		subject = fmt.Sprintf("%s %s: the directory %s", what, path, name)
	}
	why := "sosappliance acts on this file as root, so only root may change it"
	if dir {
		why = "whoever can write the directory can replace the file, and sosappliance acts on the file as root"
	}
	fix := func(file string) string {
		if dir {
			return "keep the file in directories only root can write"
		}
		return file
	}
	if sys.Uid != 0 && sys.Uid != euid {
		owner := "root (uid 0)"
		if euid != 0 {
			owner = fmt.Sprintf("root (uid 0) or uid %d, which runs sosappliance", euid)
		}
		return fmt.Errorf("%s is owned by uid %d, not %s: %s (%s)", subject, sys.Uid, owner, why, fix("chown root "+name))
	}
	mode := st.Mode()
	sticky := dir && mode&fs.ModeSticky != 0
	perm := mode.Perm()
	switch {
	case sticky:
	case perm&0o002 != 0:
		return fmt.Errorf("%s is writable by every user (mode %04o): %s (%s)", subject, perm, why, fix("chmod o-w "+name))
	case perm&0o020 != 0:
		// With a POSIX ACL the group bits are its mask: what its named
		// users and groups may do at most.
		acl, err := readACL(name)
		if err != nil {
			return fmt.Errorf("%s: reading its ACL: %w", subject, err)
		}
		if acl == nil {
			if sys.Gid != 0 {
				return fmt.Errorf("%s is writable by group %d (mode %04o): %s (%s)", subject, sys.Gid, perm, why, fix("chmod g-w "+name))
			}
			return nil
		}
		if who := acl.othersWriting(sys.Gid, euid); who != "" {
			return fmt.Errorf("%s is writable by %s through its ACL (mode %04o): %s (%s)", subject, who, perm, why, fix("setfacl -b "+name))
		}
	}
	return nil
}

// The Linux xattr form of a POSIX ACL (system.posix_acl_access): a
// little-endian version 2, then entries of tag (2 bytes), permissions (2)
// and id (4).
const (
	aclXattr    = "system.posix_acl_access"
	aclVersion  = 2
	aclUser     = 0x02
	aclGroupObj = 0x04
	aclGroup    = 0x08
	aclMask     = 0x10
	aclWrite    = 0x2
)

type aclEntry struct {
	tag, perm uint16
	id        uint32
}

type acl []aclEntry

// readACL reads name's access ACL; nil when it has none.
func readACL(name string) (acl, error) {
	buf := make([]byte, 4+8*64)
	for {
		n, err := unix.Getxattr(name, aclXattr, buf)
		switch {
		case errors.Is(err, unix.ENODATA), errors.Is(err, unix.EOPNOTSUPP):
			return nil, nil
		case errors.Is(err, unix.ERANGE):
			buf = make([]byte, 2*len(buf))
			continue
		case err != nil:
			return nil, err
		}
		return parseACL(buf[:n])
	}
}

func parseACL(b []byte) (acl, error) {
	if len(b) < 4 || (len(b)-4)%8 != 0 || binary.LittleEndian.Uint32(b) != aclVersion {
		return nil, fmt.Errorf("an ACL of %d bytes that is not version %d", len(b), aclVersion)
	}
	var a acl
	for e := b[4:]; len(e) > 0; e = e[8:] {
		a = append(a, aclEntry{binary.LittleEndian.Uint16(e), binary.LittleEndian.Uint16(e[2:]), binary.LittleEndian.Uint32(e[4:])})
	}
	return a, nil
}

// othersWriting names who other than root and euid may write through the
// ACL ("" when nobody): a named user or group, or the owning group when
// it is not root's, each as far as the mask lets it.
func (a acl) othersWriting(gid, euid uint32) string {
	mask := true // no mask entry: the named entries' own permissions
	for _, e := range a {
		if e.tag == aclMask {
			mask = e.perm&aclWrite != 0
		}
	}
	for _, e := range a {
		if e.perm&aclWrite == 0 || !mask {
			continue
		}
		switch {
		case e.tag == aclUser && e.id != 0 && e.id != euid:
			return fmt.Sprintf("user %d", e.id)
		case e.tag == aclGroup && e.id != 0:
			return fmt.Sprintf("group %d", e.id)
		case e.tag == aclGroupObj && gid != 0:
			return fmt.Sprintf("group %d", gid)
		}
	}
	return ""
}

// CheckSecret is Check for a private key (a TLS key_file): besides,
// every user may not read it. Its group may (Debian keeps keys 0640
// root:ssl-cert), and so may named users and groups of an ACL, which
// the operator gave it on purpose.
func CheckSecret(what, path string) error {
	if err := Check(what, path); err != nil {
		return err
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil // its reader says why
	}
	if perm := st.Mode().Perm(); perm&0o004 != 0 {
		return fmt.Errorf("%s %s is readable by every user (mode %04o): whoever reads a private key can pose as its owner (chmod o-r %s)", what, path, perm, path)
	}
	return nil
}
