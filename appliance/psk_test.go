package appliance

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
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
