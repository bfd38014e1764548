package appliance

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"os"
)

// minPSK is the shortest key the agents accept: 128 bits.
const minPSK = 16

// LoadPSK reads the pre-shared key file. The packages write 64 hex digits
// and a newline (32 random bytes); a file of raw bytes of at least 16 bytes
// is accepted too. A key readable by other users is refused: anyone who
// reads it can join and inject into sessions.
func LoadPSK(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("psk_file: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("psk_file %s is mode %04o; make it readable by its owner only (chmod 600)", path, st.Mode().Perm())
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("psk_file: %w", err)
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
