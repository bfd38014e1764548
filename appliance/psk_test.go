package appliance

import (
	"bytes"
	"encoding/base64"
	"github.com/sosappliance/sosappliance/internal/testsupport"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
)

// TestLoadPSK covers every form of key file: those the packages, the lab and
// operators write load; passphrases and other text are refused with the way
// to make a key.
func TestLoadPSK(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ab32 := bytes.Repeat([]byte{0xab}, 32)
	binary := make([]byte, 32) // like head -c 32 /dev/urandom: not text
	for i := range binary {
		binary[i] = byte(i * 37)
	}
	long := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		name string
		data string
		mode os.FileMode
		key  []byte // the key it loads, or nil
		want string // in the error when key is nil
	}{
		{"packages and lab: 64 hex digits and a newline", long + "\n", 0o600, ab32, ""},
		{"hex without newline, owner read-only", long, 0o400, ab32, ""},
		{"upper-case hex with CRLF", strings.ToUpper(long) + "\r\n", 0o600, ab32, ""},
		{"shortest hex: 32 digits", strings.Repeat("0f", 16), 0o600, bytes.Repeat([]byte{0x0f}, 16), ""},
		{"raw random bytes", string(binary), 0o600, binary, ""},
		{"raw random bytes ending in a newline, kept as they are", string(binary) + "\n", 0o600, append(binary[:32:32], '\n'), ""},

		{"passphrase", "correct horse battery staple\n", 0o600, nil, "a passphrase"},
		{"short passphrase", "hunter2", 0o600, nil, "a passphrase"},
		{"printable text of 20 bytes", "0123456789abcdefXYZ!", 0o600, nil, "a passphrase"},
		{"non-ASCII passphrase", "mot de passe très secret, vraiment\n", 0o600, nil, "a passphrase"},
		{"base64 of 32 bytes", base64.StdEncoding.EncodeToString(ab32) + "\n", 0o600, nil, "base64"},
		{"hex wrapped by xxd -p", long[:60] + "\n" + long[60:] + "\n", 0o600, nil, "one line of hex digits"},
		{"hex spaced by od", "ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab\n", 0o600, nil, "one line of hex digits"},
		{"odd number of hex digits", long[:63], 0o600, nil, "odd number of hex digits (63)"},
		{"short hex", strings.Repeat("ab", 15) + "\n", 0o600, nil, "30 hex digits; a key needs at least 32"},
		{"short raw bytes", string(binary[:8]), 0o600, nil, "8 raw bytes; a key needs at least 16"},
		{"empty", "\n", 0o600, nil, "is empty"},
		{"oversized", strings.Repeat("ab", 4096), 0o600, nil, "larger than 4096 bytes"},
		{"readable by others", long + "\n", 0o644, nil, "chmod 600"},
	} {
		p := write(strings.ReplaceAll(tc.name, " ", "_"), []byte(tc.data), tc.mode)
		key, err := LoadPSK(p)
		if tc.key != nil {
			if err != nil || !bytes.Equal(key, tc.key) {
				t.Errorf("%s: key %x, %v; want %x", tc.name, key, err, tc.key)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: accepted as key %x", tc.name, key)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: %v; want %q and the path in it", tc.name, err, tc.want)
		}
		if tc.mode == 0o600 && tc.name != "oversized" && !strings.Contains(err.Error(), pskGenerateCommand(p)) {
			t.Errorf("%s: %v; want the command that makes a key", tc.name, err)
		}
	}
	if _, err := LoadPSK(filepath.Join(dir, "missing")); err == nil {
		t.Error("missing file accepted")
	}
}

// TestPSKGenerateCommand runs the command the errors advise, as an operator
// would, and loads what it wrote.
func TestPSKGenerateCommand(t *testing.T) {
	p := filepath.Join(t.TempDir(), "psk")
	if out, err := exec.Command("sh", "-c", pskGenerateCommand(p)).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", pskGenerateCommand(p), err, out)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[0-9a-f]{64}\n$`).Match(data) { // packaging's pskFormat
		t.Errorf("command wrote %q, not the packages' format", data)
	}
	key, err := LoadPSK(p)
	if err != nil || len(key) != 32 {
		t.Errorf("key %x: %v", key, err)
	}
}

// TestLoadPSKOwner gives real files and symlinks to another uid (nobody,
// 65534) and checks that only a key whose file and link belong to root or
// the daemon's user loads.
func TestLoadPSKOwner(t *testing.T) {
	testsupport.RequireRoot(t) // to chown files to another user
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
