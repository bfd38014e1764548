package filetrust

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/internal/testsupport"
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
	want := "plan file " + file + " is writable by every user (mode 0666): sosappliance acts on this file as root, so only root may change it (chmod o-w " + file + ")"
	if err == nil || err.Error() != want {
		t.Errorf("got  %v\nwant %s", err, want)
	}
	chmod(file, 0o644)
	chmod(sub, 0o775)
	testsupport.RequireNoError(t, os.Chown(sub, 0, nobody))
	err = Check("plan file", file)
	want = "plan file " + file + ": the directory " + sub + " is writable by group 65534 (mode 0775): whoever can write the directory can replace the file, and sosappliance acts on the file as root (keep the file in directories only root can write)"
	if err == nil || err.Error() != want {
		t.Errorf("got  %v\nwant %s", err, want)
	}
}
