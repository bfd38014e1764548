// Package filetrust checks that a file sosappliance acts on as root (the
// config, a saved plan, the state database, a TLS key) can be changed
// only by root or by the user sosappliance runs as. Whoever can write
// sos.hcl chooses what the node writes to its kernel (any sysctl,
// kernel.core_pattern included); whoever can write a saved plan or the
// state database chooses what apply and rollback write. So a file, or
// anything on the way to it, that another user can change is refused, as
// sudo refuses such a sudoers and sshd (StrictModes) such an
// authorized_keys.
//
// The path is walked as the kernel resolves it, one name at a time, each
// looked at without following it (lstat), every symlink followed by hand
// (at most 40), ".." taken after the symlinks before it:
//
//   - the file, every directory walked through and every symlink
//     followed must be owned by root or by the effective user;
//   - no file or directory may be writable by every user, nor by a group
//     other than root's (gid 0), nor by another user or group through a
//     POSIX ACL (whose mask the mode's group bits then are: a 0664 file
//     of root's can be another user's to write);
//   - a directory writable by others is allowed when its sticky bit is
//     set (/tmp): others can then neither remove nor rename what root
//     keeps there, and what they put there themselves is not root's and
//     is refused; but a name missing in such a directory is refused too,
//     since another user could make it between the check and the open;
//   - no process of another user may hold the file open for writing, or
//     mapped shared and writable (write permission is checked at open);
//   - a symlink of /proc (/dev/fd/N) stands for the object the kernel
//     opens: when its text does not lead to that same object (a pipe, a
//     removed file), the object itself is checked.
//
// A name the walk finds missing ends it without an error: the file, or a
// directory of it, is made later by whoever checks (its directories above
// were checked), or its reader says it is not there. With every name on
// the way root's and closed to others, nobody else can change what the
// path leads to between the check and the open.
//
// A file refused for itself (an *Error) names a new file as the fix, not
// a chmod: write permission is checked at open, so a user who opened it
// while it was theirs to write keeps writing after a chmod. The daemon
// refuses such a file, by its inode, until it is replaced.
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
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// maxLinks is as many symlinks as the walk follows, as Linux's
// MAXSYMLINKS.
const maxLinks = 40

// Check returns an error naming the first file, directory or symlink on
// the way to path that a user other than root and the effective user
// could change, and the command that fixes it. what names the file in the
// error ("config file", "plan file").
func Check(what, path string) error {
	euid := uint32(os.Geteuid())
	c := checker{what: what, path: path, euid: euid}
	abs, err := absolute(path)
	if err != nil {
		return fmt.Errorf("%s %s: %w", what, path, err)
	}
	cur := "/"
	if err := c.stat(cur, dirEntry); err != nil {
		return err
	}
	rest := names(abs)
	links := 0
	for len(rest) > 0 {
		name := rest[0]
		rest = rest[1:]
		if name == ".." {
			cur = filepath.Dir(cur) // cur is resolved: its parent is the kernel's
			continue
		}
		next := filepath.Join(cur, name)
		fi, err := os.Lstat(next)
		if errors.Is(err, fs.ErrNotExist) {
			// Made later (a state database), or its reader says it is
			// missing; but in a directory others can add names to,
			// another user could make it between this check and the
			// open.
			if dst, err := os.Stat(cur); err == nil && shared(dst) {
				return fmt.Errorf("%s %s: there is no %s, and the directory %s holding it is one others can write (mode %04o, sticky): another user could make it before sosappliance opens it (keep the file in directories only root can write, such as /etc/sosappliance or /var/lib/sosappliance)",
					what, path, next, cur, dst.Mode().Perm())
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s %s: %w", what, path, err)
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			if err := c.check(next, fi, symlinkEntry); err != nil {
				return err
			}
			if links++; links > maxLinks {
				return fmt.Errorf("%s %s: more than %d symlinks on the way", what, path, maxLinks)
			}
			target, err := os.Readlink(next)
			if err != nil {
				return fmt.Errorf("%s %s: %w", what, path, err)
			}
			if magic, err := c.magicLink(next, target, len(rest) == 0); magic || err != nil {
				return err
			}
			if filepath.IsAbs(target) {
				cur = "/"
			}
			rest = append(names(target), rest...)
			continue
		}
		kind := fileEntry
		if len(rest) > 0 || fi.IsDir() {
			kind = dirEntry
		}
		if err := c.check(next, fi, kind); err != nil {
			return err
		}
		cur = next
	}
	return nil
}

// magicLink handles a symlink of /proc (/proc/self/fd/N, which /dev/fd/N
// leads to): the kernel opens the object it stands for, whatever its
// text says. When the text walks to that same object (a file still
// named there), the walk goes on by the text and checks its way; when it
// does not (a pipe, "name (deleted)"), the object itself is checked as
// the file, and magic is true: the walk ends there. A path that goes on
// below such an object is refused: its way cannot be checked.
func (c checker) magicLink(link, target string, last bool) (magic bool, err error) {
	if !strings.HasPrefix(link, "/proc/") {
		return false, nil
	}
	obj, err := os.Stat(link)
	if err != nil {
		return false, nil // dangling: the walk finds the text missing
	}
	named := target
	if !filepath.IsAbs(named) {
		named = filepath.Join(filepath.Dir(link), named) // /proc/self -> "27754"
	}
	if nfi, err := os.Stat(named); err == nil && os.SameFile(obj, nfi) {
		return false, nil
	}
	if !last {
		return true, fmt.Errorf("%s %s: %s stands for %q, which no path of it leads to, so what is below it cannot be checked", c.what, c.path, link, target)
	}
	kind := fileEntry
	if obj.IsDir() {
		kind = dirEntry
	}
	return true, c.check(link, obj, kind)
}

// absolute is path from /, not cleaned: filepath.Abs would take "a/.."
// lexically, where the kernel goes up from the target of a symlink a.
// The working directory is the kernel's (getcwd), not $PWD's; one that
// was removed leaves a relative path nowhere to be checked from.
func absolute(path string) (string, error) {
	if filepath.IsAbs(path) {
		return path, nil
	}
	wd, err := unix.Getwd()
	if err != nil {
		return "", fmt.Errorf("the working directory, which the relative path starts from: %w", err)
	}
	return wd + "/" + path, nil
}

// shared says whether st is a sticky directory others can write (/tmp):
// they can add names to it, but not remove or rename root's.
func shared(st fs.FileInfo) bool {
	return st.IsDir() && st.Mode()&fs.ModeSticky != 0 && st.Mode().Perm()&0o022 != 0
}

// names are the names of a path in order, without the empty ones and ".".
func names(path string) []string {
	var out []string
	for n := range strings.SplitSeq(path, "/") {
		if n != "" && n != "." {
			out = append(out, n)
		}
	}
	return out
}

type entryKind int

const (
	fileEntry entryKind = iota
	dirEntry
	symlinkEntry
)

type checker struct {
	what, path string
	euid       uint32
}

func (c checker) stat(name string, kind entryKind) error {
	fi, err := os.Lstat(name)
	if err != nil {
		return fmt.Errorf("%s %s: %w", c.what, c.path, err)
	}
	return c.check(name, fi, kind)
}

// Error is a refusal of the file itself (not of what is on the way to
// it): another user could write it, or owns it. Such a user may hold it
// open for writing, which no chmod undoes; a reader that saw it so may
// refuse the same file (Dev, Ino) after it is fixed in place.
type Error struct {
	Msg      string
	Dev, Ino uint64
}

func (e *Error) Error() string { return e.Msg }

// check checks one name on the way to the path.
func (c checker) check(name string, st fs.FileInfo, kind entryKind) error {
	err := c.check1(name, st, kind)
	if err == nil && kind == fileEntry && st.Mode().IsRegular() {
		if w := otherWriter(st, c.euid); w != "" {
			err = fmt.Errorf("%s %s is held open for writing by %s: write permission is checked at open, so it can write the file whatever its mode now (stop that process; then, since it could write the file, read it and replace it: install -m %04o -o root -g root %s %s.new && mv %s.new %s)",
				c.what, c.path, w, st.Mode().Perm()&^0o022, name, name, name, name)
		}
	}
	if err != nil && kind == fileEntry {
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			return &Error{Msg: err.Error(), Dev: uint64(sys.Dev), Ino: sys.Ino}
		}
	}
	return err
}

func (c checker) check1(name string, st fs.FileInfo, kind entryKind) error {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s %s: cannot read the owner of %s", c.what, c.path, name)
	}
	subject := fmt.Sprintf("%s %s", c.what, c.path)
	why := "sosappliance acts on this file as root, so only root may change it; " +
		"a chmod or chown leaves in a writer that holds it open, so replace it with a new file of root's, after reading it"
	// The fix: for the file, a new one (write permission is checked at
	// open: a descriptor opened while others could write outlives a
	// chmod); for what is on the way, a command on the name (a
	// directory's permissions are checked at each lookup) and the other
	// way out (a directory of someone's home is theirs to keep).
	keep := st.Mode().Perm() &^ 0o022
	fix := func(string) string {
		return fmt.Sprintf("install -m %04o -o root -g root %s %s.new && mv %s.new %s", keep, name, name, name, name)
	}
	switch {
	case kind == dirEntry && name != c.path:
		subject = fmt.Sprintf("%s %s: the directory %s", c.what, c.path, name)
		why = "whoever can write the directory can replace the file, and sosappliance acts on the file as root"
		fix = func(cmd string) string {
			return cmd + " " + name + ", or keep the file in directories only root can write"
		}
	case kind == symlinkEntry:
		subject = fmt.Sprintf("%s %s: the symlink %s", c.what, c.path, name)
		why = "whoever owns the symlink can point it elsewhere, and sosappliance acts on the file as root"
		fix = func(string) string { return "chown -h root " + name + ", or name the file by a path of root's" }
	}
	if sys.Uid != 0 && sys.Uid != c.euid {
		owner := "root (uid 0)"
		if c.euid != 0 {
			owner = fmt.Sprintf("root (uid 0) or uid %d, which runs sosappliance", c.euid)
		}
		return fmt.Errorf("%s is owned by uid %d, not %s: %s (%s)", subject, sys.Uid, owner, why, fix("chown root"))
	}
	if kind == symlinkEntry {
		return nil // a symlink's own mode means nothing
	}
	mode := st.Mode()
	perm := mode.Perm()
	if shared(st) {
		return nil // what is in it is checked name by name
	}
	switch {
	case perm&0o002 != 0:
		return fmt.Errorf("%s is writable by every user (mode %04o): %s (%s)", subject, perm, why, fix("chmod o-w"))
	case perm&0o020 != 0:
		// With a POSIX ACL the group bits are its mask: what its named
		// users and groups may do at most.
		acl, err := readACL(name)
		if err != nil {
			return fmt.Errorf("%s: reading its ACL: %w", subject, err)
		}
		if acl == nil {
			if sys.Gid != 0 {
				return fmt.Errorf("%s is writable by group %d (mode %04o): %s (%s)", subject, sys.Gid, perm, why, fix("chmod g-w"))
			}
			return nil
		}
		if who := acl.othersWriting(sys.Gid, c.euid); who != "" {
			return fmt.Errorf("%s is writable by %s through its ACL (mode %04o): %s (%s)", subject, who, perm, why, fix("setfacl -b"))
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
