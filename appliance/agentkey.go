package appliance

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/sosappliance/sosappliance/dataplane/stripe"
)

// LoadAgentKey reads an agent's private key file (key_file, per-agent
// keys): one line, the standard base64 of a 32-byte X25519 private key,
// as `sosappliance keygen` writes it. The file is held to the PSK file's
// rules (LoadPSK): a regular file owned by root or the daemon's user and
// readable by its owner only.
func LoadAgentKey(path string) ([]byte, error) {
	raw, name, _, err := readSecretFile("key_file", path, "a key is one line of 44 base64 characters")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w; make the agent's key on its node with `sosappliance keygen --out %s` and put the public_key it prints in the agent's block", err, path)
	}
	if err != nil {
		return nil, err
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(raw)))
	if err != nil || len(key) != stripe.AgentKeySize {
		return nil, fmt.Errorf("key_file %s does not hold an agent key (one line, the base64 of %d bytes); "+
			"make a new one with `sosappliance keygen --out NEWFILE`, then set key_file to NEWFILE and public_key to what it prints",
			name, stripe.AgentKeySize)
	}
	return key, nil
}

// WriteAgentKey makes a new agent key, writes its private key to path
// (created readable by its owner only; an existing file is left alone
// and refused, since its key may be in use) and returns the public key
// as the configuration's public_key takes it.
func WriteAgentKey(path string) (string, error) {
	k, err := stripe.GenerateAgentKey(rand.Reader)
	if err != nil {
		return "", err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("%s exists: an agent key may be in use there; remove it first to replace it (and update public_key)", path)
	}
	if err != nil {
		return "", err
	}
	_, werr := fmt.Fprintln(f, base64.StdEncoding.EncodeToString(k.Private()))
	if err := f.Close(); werr == nil {
		werr = err
	}
	if werr != nil {
		_ = os.Remove(path)
		return "", werr
	}
	pub := k.Public()
	return base64.StdEncoding.EncodeToString(pub[:]), nil
}
