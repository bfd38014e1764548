package appliance

import (
	"bytes"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"unicode"
	"unicode/utf8"
)

// PSKID names a PSK without revealing it: the first 4 bytes of
// HKDF-SHA256(psk, info "sosappliance psk id"), in hex. Status and the
// sosappliance_psk_info metric show it, so that an operator rotating the
// PSK sees which nodes hold which. 32 bits of a key derivation tell
// nothing about a key of 128 bits or more; they only tell keys apart
// (two PSKs share an id with probability 2^-32).
func PSKID(psk []byte) string {
	id, err := hkdf.Key(sha256.New, psk, nil, "sosappliance psk id", 4)
	if err != nil {
		// Only for a length HKDF cannot give; 4 bytes it always can.
		panic(err)
	}
	return hex.EncodeToString(id)
}

// minPSK is the shortest key the agents accept: 128 bits.
const minPSK = 16

// maxPSKFile bounds what LoadPSK reads: a key is 65 bytes, and a psk_file
// pointed at a log or a device must not be read whole.
const maxPSKFile = 4096

// LoadPSK reads the pre-shared key file. Two forms are keys:
//
//   - one line of hex digits, at least 32 (16 bytes), surrounding whitespace
//     ignored: what the packages and the lab write (64 digits and a newline);
//   - raw random bytes, at least 16, used as they are: binary, that is not
//     printable text (`head -c 32 /dev/urandom`).
//
// Printable text that is not such a line is refused, because it is most
// likely a passphrase, far weaker than its length suggests; stretching it
// would only hide that. Base64 and hex wrapped over lines or spaced out are
// refused for the same reason and because earlier versions used such files
// as raw bytes: every file accepted here means the key it always meant, so
// agents of mixed versions never silently disagree.
//
// Anyone who reads or replaces the key can join and inject into sessions,
// so the file must be a regular file owned by root or by the daemon's user
// (the euid) and readable by its owner only. A symlink is followed: the file
// it points to is the one opened, checked and read (through one descriptor,
// so a swap between check and read does not help), and the link itself must
// have a trusted owner too, since in a sticky directory such as /tmp its
// owner can replace it. Directories above the file are not checked.
func LoadPSK(path string) ([]byte, error) {
	raw, name, target, err := readSecretFile("psk_file", path, "a key is 64 hex digits")
	if err != nil {
		return nil, err
	}
	key, err := parsePSK(raw)
	if err != nil {
		return nil, fmt.Errorf("psk_file %s %w; generate a key as the packages do, then copy the same file to every agent: %s", name, err, pskGenerateCommand(target))
	}
	return key, nil
}

// readSecretFile reads a key file at path, which its errors call attr
// (the configuration's attribute): it must be a regular file owned by
// root or the daemon's user and readable by its owner only, as LoadPSK
// says; at most maxPSKFile bytes (sizeHint says what a key is). It
// returns the bytes, the file as errors call it, and its own path.
func readSecretFile(attr, path, sizeHint string) (raw []byte, name, target string, err error) {
	link, err := os.Lstat(path)
	if err != nil {
		return nil, "", "", fmt.Errorf("%s: %w", attr, err)
	}
	name, target = path, path
	if link.Mode()&fs.ModeSymlink != 0 {
		if err := checkSecretOwner(attr, path, path, "symlink", link); err != nil {
			return nil, "", "", err
		}
		if t, err := filepath.EvalSymlinks(path); err == nil {
			name, target = fmt.Sprintf("%s (a symlink to %s)", path, t), t
		}
	}
	// O_NONBLOCK so that a FIFO does not block the open before it is
	// refused below; it changes nothing for a regular file.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, "", "", fmt.Errorf("%s: %w", attr, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, "", "", fmt.Errorf("%s: %w", attr, err)
	}
	if !st.Mode().IsRegular() {
		return nil, "", "", fmt.Errorf("%s %s is not a regular file (%s)", attr, name, st.Mode().Type())
	}
	if err := checkSecretOwner(attr, name, target, "file", st); err != nil {
		return nil, "", "", err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, "", "", fmt.Errorf("%s %s is mode %04o; make it readable by its owner only (chmod 600)", attr, name, st.Mode().Perm())
	}
	raw, err = io.ReadAll(io.LimitReader(f, maxPSKFile+1))
	if err != nil {
		return nil, "", "", fmt.Errorf("%s %s: %w", attr, name, err)
	}
	if len(raw) > maxPSKFile {
		return nil, "", "", fmt.Errorf("%s %s is larger than %d bytes; %s", attr, name, maxPSKFile, sizeHint)
	}
	return raw, name, target, nil
}

// pskGenerateCommand is the shell command that writes a fresh key to path
// in the packages' format, readable by its owner only.
func pskGenerateCommand(path string) string {
	return fmt.Sprintf("(umask 077; od -An -v -tx1 -N32 /dev/urandom | tr -d ' \\n' >%s; echo >>%s)", path, path)
}

// parsePSK decodes the file's bytes; its errors read after "psk_file PATH".
func parsePSK(raw []byte) ([]byte, error) {
	text := bytes.TrimSpace(raw)
	switch {
	case len(text) == 0:
		return nil, errors.New("is empty")
	case isHexDigits(text):
		if len(text)%2 != 0 {
			return nil, fmt.Errorf("holds an odd number of hex digits (%d)", len(text))
		}
		if len(text) < 2*minPSK {
			return nil, fmt.Errorf("holds %d hex digits; a key needs at least %d (%d bytes)", len(text), 2*minPSK, minPSK)
		}
		key := make([]byte, len(text)/2)
		if _, err := hex.Decode(key, text); err != nil {
			return nil, err
		}
		return key, nil
	case isText(raw):
		return nil, errors.New("holds text that is not one line of hex digits: a passphrase (or base64, or wrapped hex) is not accepted as a key")
	case len(raw) < minPSK:
		return nil, fmt.Errorf("holds %d raw bytes; a key needs at least %d", len(raw), minPSK)
	}
	return raw, nil
}

func isHexDigits(b []byte) bool {
	for _, c := range b {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// isText tells a human's text from random bytes: 32 random bytes are valid
// UTF-8 made only of printable characters with odds far below 1e-9.
func isText(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if !unicode.IsGraphic(r) && !unicode.IsSpace(r) {
			return false
		}
	}
	return true
}

// checkSecretOwner refuses a key file, or a symlink to one, that neither
// root nor the daemon's user owns: its owner could read or rewrite the
// key. attr is the configuration's attribute naming the file, name the
// file as errors call it, target what the fix should chown.
func checkSecretOwner(attr, name, target, what string, fi fs.FileInfo) error {
	sys, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s %s: cannot read the owner of the %s", attr, name, what)
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
	return fmt.Errorf("%s %s: the %s is owned by uid %d; it must be owned by %s (%s)", attr, name, what, sys.Uid, want, fix)
}
