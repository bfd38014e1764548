package filetrust

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// Magic links of /proc whose text is not their object: root's memfd
// (0777, "/memfd:x (deleted)") and a socket are refused as writable by
// every user (fail closed); a removed file of root's that was 0666 is
// refused for its mode; a path going on below a removed directory held
// open is refused; a pipe of root's (0600) is taken, its reader refusing
// what is no regular file. Review (helper-91); it passes on 01833b3.
func TestMagicLinkObjects(t *testing.T) {
	testsupport.RequireRoot(t)
	dir := t.TempDir()
	fdPath := func(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

	mfd, err := unix.MemfdCreate("x", 0)
	testsupport.RequireNoError(t, err)
	defer unix.Close(mfd)
	if err := Check("config file", fdPath(mfd)); err == nil {
		t.Errorf("a memfd (mode 0777) was taken")
	}
	sfd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	testsupport.RequireNoError(t, err)
	defer unix.Close(sfd)
	if err := Check("config file", "/dev/fd/"+strconv.Itoa(sfd)); err == nil {
		t.Errorf("a socket was taken")
	}

	open := filepath.Join(dir, "open")
	testsupport.RequireNoError(t, os.WriteFile(open, []byte("x"), 0o666))
	testsupport.RequireNoError(t, os.Chmod(open, 0o666))
	f, err := os.Open(open)
	testsupport.RequireNoError(t, err)
	defer f.Close()
	testsupport.RequireNoError(t, os.Remove(open))
	if err := Check("config file", fdPath(int(f.Fd()))); err == nil {
		t.Errorf("a removed 0666 file of root's was taken")
	}

	sub := filepath.Join(dir, "sub")
	testsupport.RequireNoError(t, os.Mkdir(sub, 0o755))
	d, err := os.Open(sub)
	testsupport.RequireNoError(t, err)
	defer d.Close()
	testsupport.RequireNoError(t, os.Remove(sub))
	if err := Check("config file", fdPath(int(d.Fd()))+"/sos.hcl"); err == nil {
		t.Errorf("a path below a removed directory was taken")
	}

	var p [2]int
	testsupport.RequireNoError(t, unix.Pipe(p[:]))
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	if err := Check("config file", fdPath(p[0])); err != nil {
		t.Errorf("root's pipe: %v", err)
	}
}
