package filetrust

import (
	"cmp"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/internal/testsupport"
	"golang.org/x/sys/unix"
)

// nobody is the uid and gid another user's files get here.
const nobody = 65534

// tree makes dir/sub/sos.hcl (0644, dirs 0755) and returns the paths.
func tree(t *testing.T) (dir, sub, file string) {
	t.Helper()
	dir = t.TempDir()
	sub = filepath.Join(dir, "sub")
	file = filepath.Join(sub, "sos.hcl")
	testsupport.RequireNoError(t, os.Mkdir(sub, 0o755))
	testsupport.RequireNoError(t, os.WriteFile(file, []byte("x"), 0o644))
	testsupport.RequireNoError(t, os.Chmod(file, 0o644)) // whatever the umask
	return dir, sub, file
}

func TestCheck(t *testing.T) {
	testsupport.Require(t, os.Geteuid() == 0, "changing a file's owner to another user needs root")
	type tc struct {
		name  string
		setup func(t *testing.T, dir, sub, file string) string // the path to check
		want  string                                           // "" accepted; else in the error
	}
	chmod := func(t *testing.T, p string, m os.FileMode) {
		testsupport.RequireNoError(t, os.Chmod(p, m))
	}
	chown := func(t *testing.T, p string, uid, gid int) {
		testsupport.RequireNoError(t, os.Lchown(p, uid, gid))
	}
	cases := []tc{
		{"root's 0644 file", func(t *testing.T, dir, sub, file string) string { return file }, ""},
		{"world-writable file", func(t *testing.T, dir, sub, file string) string {
			chmod(t, file, 0o666)
			return file
		}, "is writable by every user (mode 0666)"},
		{"group-writable, another group", func(t *testing.T, dir, sub, file string) string {
			chmod(t, file, 0o664)
			chown(t, file, 0, nobody)
			return file
		}, "is writable by group 65534"},
		{"group-writable, root's group", func(t *testing.T, dir, sub, file string) string {
			chmod(t, file, 0o664)
			return file
		}, ""},
		{"another user's file", func(t *testing.T, dir, sub, file string) string {
			chown(t, file, nobody, 0)
			return file
		}, "is owned by uid 65534, not root (uid 0)"},
		{"world-writable directory", func(t *testing.T, dir, sub, file string) string {
			chmod(t, sub, 0o777)
			return file
		}, "the directory " + "SUB" + " is writable by every user"},
		{"world-writable sticky directory (/tmp)", func(t *testing.T, dir, sub, file string) string {
			chmod(t, sub, 0o777|os.ModeSticky)
			return file
		}, ""},
		{"another user's directory", func(t *testing.T, dir, sub, file string) string {
			chown(t, sub, nobody, nobody)
			return file
		}, "the directory SUB is owned by uid 65534"},
		{"another user's directory above", func(t *testing.T, dir, sub, file string) string {
			chown(t, dir, nobody, nobody)
			return file
		}, "the directory DIR is owned by uid 65534"},
		{"a symlink in a writable directory to a good file", func(t *testing.T, dir, sub, file string) string {
			open := filepath.Join(dir, "open")
			testsupport.RequireNoError(t, os.Mkdir(open, 0o755))
			chmod(t, open, 0o777)
			link := filepath.Join(open, "sos.hcl")
			testsupport.RequireNoError(t, os.Symlink(file, link))
			return link
		}, "the directory DIR/open is writable by every user"},
		{"a good symlink to a file in a writable directory", func(t *testing.T, dir, sub, file string) string {
			chmod(t, sub, 0o777)
			link := filepath.Join(dir, "sos.hcl")
			testsupport.RequireNoError(t, os.Symlink(file, link))
			return link
		}, "the directory SUB is writable by every user"},
		{"a file not made yet under a writable directory", func(t *testing.T, dir, sub, file string) string {
			chmod(t, sub, 0o777)
			return filepath.Join(sub, "state", "state.db")
		}, "the directory SUB is writable by every user"},
		{"a file not made yet under good directories", func(t *testing.T, dir, sub, file string) string {
			return filepath.Join(sub, "state", "state.db")
		}, ""},
		{"a relative path", func(t *testing.T, dir, sub, file string) string {
			chmod(t, sub, 0o777)
			t.Chdir(sub)
			return "sos.hcl"
		}, "the directory SUB is writable by every user"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir, sub, file := tree(t)
			path := c.setup(t, dir, sub, file)
			err := Check("config file", path)
			want := strings.NewReplacer("SUB", sub, "DIR", dir).Replace(c.want)
			switch {
			case want == "" && err != nil:
				t.Errorf("Check(%s): %v, want it accepted", path, err)
			case want != "" && err == nil:
				t.Errorf("Check(%s) accepted it, want an error with %q", path, want)
			case want != "" && !strings.Contains(err.Error(), want):
				t.Errorf("Check(%s): %v\nwant it to say %q", path, err, want)
			case err != nil && !strings.Contains(err.Error(), "config file "):
				t.Errorf("Check(%s): %v does not name what the file is", path, err)
			}
		})
	}
}

// A config given as `-c <(...)` is a pipe of the caller's: /dev/fd/N,
// which resolves to "pipe:[N]".
func TestCheckPipe(t *testing.T) {
	r, w, err := os.Pipe()
	testsupport.RequireNoError(t, err)
	defer r.Close()
	defer w.Close()
	if err := Check("config file", "/dev/fd/"+strconv.Itoa(int(r.Fd()))); err != nil {
		t.Errorf("a pipe of this process: %v", err)
	}
}

// The error names the fix, and which file.
func TestCheckMessage(t *testing.T) {
	testsupport.Require(t, os.Geteuid() == 0, "the message for root")
	_, sub, file := tree(t)
	chmod := func(p string, m os.FileMode) { testsupport.RequireNoError(t, os.Chmod(p, m)) }
	chmod(file, 0o666)
	err := Check("plan file", file)
	want := "plan file " + file + " is writable by every user (mode 0666): sosappliance acts on this file as root, so only root may change it; " +
		"a chmod or chown leaves in a writer that holds it open, so replace it with a new file of root's, after reading it " +
		"(install -m 0644 -o root -g root " + file + " " + file + ".new && mv " + file + ".new " + file + ")"
	if err == nil || err.Error() != want {
		t.Errorf("got  %v\nwant %s", err, want)
	}
	chmod(file, 0o644)
	chmod(sub, 0o775)
	testsupport.RequireNoError(t, os.Chown(sub, 0, nobody))
	err = Check("plan file", file)
	want = "plan file " + file + ": the directory " + sub + " is writable by group 65534 (mode 0775): whoever can write the directory can replace the file, and sosappliance acts on the file as root (chmod g-w " + sub + ", or keep the file in directories only root can write)"
	if err == nil || err.Error() != want {
		t.Errorf("got  %v\nwant %s", err, want)
	}
}

// setACL gives path an access ACL of the given entries (tag, perm, id), as
// setfacl would, through the kernel's xattr form.
func setACL(t *testing.T, path string, entries ...aclEntry) {
	t.Helper()
	entries = slices.Clone(entries)
	slices.SortFunc(entries, func(a, b aclEntry) int { return cmp.Or(cmp.Compare(a.tag, b.tag), cmp.Compare(a.id, b.id)) })
	b := binary.LittleEndian.AppendUint32(nil, aclVersion)
	for _, e := range entries {
		b = binary.LittleEndian.AppendUint16(b, e.tag)
		b = binary.LittleEndian.AppendUint16(b, e.perm)
		b = binary.LittleEndian.AppendUint32(b, e.id)
	}
	if err := unix.Setxattr(path, aclXattr, b, 0); err != nil {
		t.Fatalf("set an ACL on %s: %v", path, err)
	}
}

// A root-owned 0664 file of root's group looks like one only root can
// write, but with an ACL its group bits are the mask: a named user's
// write entry lets that user write. The attack is mounted: user 65534
// writes the file; Check refuses it, and takes ACLs that give no one
// else write.
func TestCheckACL(t *testing.T) {
	testsupport.RequireRoot(t, "setpriv")
	const (
		userObj, other = 0x01, 0x20
		none           = 0xffffffff
	)
	base := func(extra ...aclEntry) []aclEntry {
		return append([]aclEntry{{userObj, 6, none}, {aclGroupObj, 4, none}, {other, 4, none}}, extra...)
	}
	cases := []struct {
		name    string
		entries []aclEntry
		want    string
		writes  bool // user 65534 can write the file
	}{
		{"a named user with write", base(aclEntry{aclUser, 6, nobody}, aclEntry{aclMask, 6, none}), "is writable by user 65534 through its ACL", true},
		{"a named group with write", base(aclEntry{aclGroup, 6, nobody}, aclEntry{aclMask, 6, none}), "is writable by group 65534 through its ACL", true},
		{"a named user, the mask without write", base(aclEntry{aclUser, 6, nobody}, aclEntry{aclMask, 4, none}), "", false},
		{"root named, with write", base(aclEntry{aclUser, 6, 0}, aclEntry{aclMask, 6, none}), "", false},
		{"a named user reading only", base(aclEntry{aclUser, 4, nobody}, aclEntry{aclMask, 6, none}), "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir, _, file := tree(t)
			for d := dir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
				testsupport.RequireNoError(t, os.Chmod(d, 0o755))
			}
			setACL(t, file, c.entries...)
			wrote := testsupport.AsOtherUser(t, "sh", "-c", "echo x >> "+file).Run() == nil
			if wrote != c.writes {
				t.Fatalf("user 65534 could write the file: %v, want %v (the kernel reads the ACL otherwise)", wrote, c.writes)
			}
			err := Check("config file", file)
			switch {
			case c.want == "" && err != nil:
				t.Errorf("Check: %v, want it accepted", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Errorf("Check: %v, want an error with %q", err, c.want)
			}
		})
	}
}

func TestParseACLRefusesOtherShapes(t *testing.T) {
	for _, b := range [][]byte{nil, {2, 0, 0}, {1, 0, 0, 0}, {2, 0, 0, 0, 1}} {
		if _, err := parseACL(b); err == nil {
			t.Errorf("parseACL(%v) took it", b)
		}
	}
}
