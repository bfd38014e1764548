package appliance

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestLoadPSK(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		return p
	}
	hexKey := strings.Repeat("ab", 32) + "\n"
	key, err := LoadPSK(write("hex", []byte(hexKey), 0o600))
	if err != nil || !bytes.Equal(key, bytes.Repeat([]byte{0xab}, 32)) {
		t.Fatalf("hex key: %x %v", key, err)
	}
	raw := []byte("0123456789abcdefXYZ!")
	if key, err := LoadPSK(write("raw", raw, 0o400)); err != nil || !bytes.Equal(key, raw) {
		t.Fatalf("raw key: %q %v", key, err)
	}
	for name, tc := range map[string]struct {
		data []byte
		mode os.FileMode
		want string
	}{
		"short":    {[]byte("short"), 0o600, "at least 16"},
		"readable": {[]byte(hexKey), 0o644, "chmod 600"},
	} {
		if _, err := LoadPSK(write(name, tc.data, tc.mode)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
	if _, err := LoadPSK(filepath.Join(dir, "missing")); err == nil {
		t.Error("missing file accepted")
	}
}

// TestLoadPSKOwner gives real files and symlinks to another uid (nobody,
// 65534) and checks that only a key whose file and link belong to root or
// the daemon's user loads.
func TestLoadPSKOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		reconcileSkipOrFail(t, "needs root to chown files to another user")
	}
	const nobody = 65534
	dir := t.TempDir()
	key := []byte(strings.Repeat("5a", 32) + "\n")
	file := func(name string, uid int) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, key, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, 0); err != nil {
			t.Fatal(err)
		}
		return p
	}
	link := func(name, target string, uid int) string {
		p := filepath.Join(dir, name)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(p, uid, 0); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good, foreign := file("root-owned", 0), file("nobody-owned", nobody)
	for _, tc := range []struct {
		name, path string
		want       []string // in the error; none means the key loads
	}{
		{"root's file", good, nil},
		{"root's link to root's file", link("link-ok", good, 0), nil},
		{"nobody's file", foreign, []string{foreign, "the file is owned by uid 65534", "must be owned by root (uid 0)", "chown root:root " + foreign}},
		{"root's link to nobody's file", link("link-to-foreign", foreign, 0),
			[]string{"link-to-foreign (a symlink to " + foreign + ")", "the file is owned by uid 65534"}},
		{"nobody's link to root's file", link("foreign-link", good, nobody),
			[]string{"foreign-link", "the symlink is owned by uid 65534", "chown -h root:root"}},
	} {
		got, err := LoadPSK(tc.path)
		switch {
		case tc.want == nil && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want == nil && !bytes.Equal(got, bytes.Repeat([]byte{0x5a}, 32)):
			t.Errorf("%s: key %x", tc.name, got)
		case tc.want != nil && err == nil:
			t.Errorf("%s: accepted", tc.name)
		case tc.want != nil:
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s: %v; want %q in it", tc.name, err, w)
				}
			}
		}
	}
}

func TestLoadPSKNotRegular(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadPSK(fifo); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("fifo: %v", err)
	}
}
