package appliance

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestLoadAgentKeyHintFollowable: a key_file that holds no agent
// key is refused with a hint that can be followed: keygen to another
// file, then key_file and public_key set to it. (Found by review: the
// hint named the same path, which keygen refuses as existing; and where
// key_file named the PSK's file by mistake, following both hints deleted
// the PSK.)
func TestLoadAgentKeyHintFollowable(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.key")
	if err := os.WriteFile(path, []byte(strings.Repeat("5a", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := LoadAgentKey(path)
	if err == nil {
		t.Fatal("a PSK taken for an agent key")
	}
	m := regexp.MustCompile("sosappliance keygen --out ([^` ]+)").FindStringSubmatch(err.Error())
	if m == nil {
		t.Fatalf("no keygen hint: %v", err)
	}
	// keygen refuses an existing file: the hint must name another.
	if m[1] == path || !strings.Contains(err.Error(), "set key_file") {
		t.Errorf("LoadAgentKey says %q: it sends keygen to the file that exists, or does not say to point key_file at the new one", err)
	}
}

// TestMissingKeyFileSaysKeygen: per-agent keys turned on in the
// file before keygen ran on a node (or a typo in key_file) fail the node's
// load saying how to make the key. (Found by review: only "no such file
// or directory".)
func TestMissingKeyFileSaysKeygen(t *testing.T) {
	_, err := LoadAgentKey(filepath.Join(t.TempDir(), "agent.key"))
	if err == nil || !strings.Contains(err.Error(), "keygen") {
		t.Errorf("a missing key_file: %v; want the error to say how to make one (sosappliance keygen --out ...)", err)
	}
}
