package appliance

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/dataplane/stripe"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestWriteAndLoadAgentKey: keygen's file is created owner-only, read
// back as the key whose public key it printed, and never overwritten;
// a file others may read, or that holds no key, is refused saying how to
// make one.
func TestWriteAndLoadAgentKey(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.key")
	pub, err := WriteAgentKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, mode %v; want 0600", err, st.Mode().Perm())
	}
	priv, err := LoadAgentKey(path)
	if err != nil {
		t.Fatal(err)
	}
	k, err := stripe.NewAgentKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	if p := k.Public(); base64.StdEncoding.EncodeToString(p[:]) != pub {
		t.Errorf("the file's key has public key %x, keygen printed %s", p, pub)
	}
	before, _ := os.ReadFile(path)
	if _, err := WriteAgentKey(path); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("a second keygen to the same file: %v, want it refused", err)
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Error("a refused keygen changed the key file")
	}
	for _, c := range []struct {
		name, body string
		mode       os.FileMode
		want       string
	}{
		{"readable by others", string(before), 0o644, "make it readable by its owner only"},
		{"a PSK", strings.Repeat("5a", 32) + "\n", 0o600, "does not hold an agent key"},
		{"short", base64.StdEncoding.EncodeToString(make([]byte, 31)) + "\n", 0o600, "sosappliance keygen --out"},
	} {
		p := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-"))
		if err := os.WriteFile(p, []byte(c.body), c.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, c.mode); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadAgentKey(p); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
}

// TestDaemonAgentKeys runs a node with per-agent keys: its agent starts
// with the key file keygen wrote; a reload that names another agent's
// key file, or one others may read, or an unedited reload after the key
// file was replaced by another key, is refused with the reason, and the
// agent keeps running on its key.
func TestDaemonAgentKeys(t *testing.T) {
	if !testsupport.InFreshNetns(t, "ip", "nft") {
		return
	}
	n := newReloadNode(t)
	ownFile, otherFile := filepath.Join(n.dir, "a1.key"), filepath.Join(n.dir, "b1.key")
	ownPub, err := WriteAgentKey(ownFile)
	testsupport.RequireNoError(t, err)
	otherPub, err := WriteAgentKey(otherFile)
	testsupport.RequireNoError(t, err)
	withKeys := func(keyFile string) string {
		cfg := n.config(reloadEdit{rmemMax: "100000", controllerPort: 6653, dataPort: 9877})
		cfg = strings.Replace(cfg, "agent \"a1\" {\n", fmt.Sprintf("agent \"a1\" {\n    public_key = %q\n    key_file = %q\n", ownPub, keyFile), 1)
		return strings.Replace(cfg, "agent \"b1\" {\n", fmt.Sprintf("agent \"b1\" {\n    public_key = %q\n", otherPub), 1)
	}
	writeFile(t, n.cfgPath, withKeys(ownFile))
	d := n.daemon()
	ctx := runDaemon(t, d, n.logs)
	testsupport.Eventually(t, 15*time.Second, "start-up with the agent's key", func() bool {
		return d.Status().Serial == 1 && listens("10.1.0.2:9877")
	})
	loose := filepath.Join(n.dir, "loose.key")
	raw, err := os.ReadFile(ownFile)
	testsupport.RequireNoError(t, err)
	writeFile(t, loose, string(raw))
	testsupport.RequireNoError(t, os.Chmod(loose, 0o644))
	var fails uint64
	for _, c := range []struct{ name, file, want string }{
		{"another agent's key file", otherFile, "is not agent a1's"},
		{"a key file others may read", loose, "make it readable by its owner only"},
	} {
		writeFile(t, n.cfgPath, withKeys(c.file))
		var st Status
		testsupport.Eventually(t, 15*time.Second, c.name+": a refused reload", func() bool {
			st = d.Status()
			return st.ReloadFails > fails && st.LastReload != nil && strings.Contains(st.LastReload.Result, c.want)
		})
		fails = st.ReloadFails
		if !listens("10.1.0.2:9877") {
			t.Errorf("%s: the agent stopped serving", c.name)
		}
	}

	// The key file replaced by another key under the same path (keygen
	// to it after a remove), sos.hcl as it runs: an unedited reload
	// refuses it too (a new key takes an edit of public_key on every
	// node). Found by review (helper-41): the first version of the
	// unedited reload's key re-read said it took a key_file replaced in
	// place, which it never can.
	reloads := d.Status().Reloads
	writeFile(t, n.cfgPath, withKeys(ownFile))
	testsupport.Eventually(t, 15*time.Second, "the file as it runs reloaded", func() bool {
		st := d.Status()
		return st.Reloads > reloads && st.LastReload != nil && st.LastReload.Result == "unchanged"
	})
	testsupport.RequireNoError(t, os.Remove(ownFile))
	_, err = WriteAgentKey(ownFile)
	testsupport.RequireNoError(t, err)
	fails = d.Status().ReloadFails
	d.reload(ctx)
	st := d.Status()
	if st.ReloadFails != fails+1 || st.LastReload == nil || !strings.Contains(st.LastReload.Result, "is not agent a1's") {
		t.Errorf("an unedited reload after a1's key_file was replaced by another key: %d failures (was %d), %+v; want it refused, naming the key",
			st.ReloadFails, fails, st.LastReload)
	}
	if !listens("10.1.0.2:9877") || len(st.Agents) == 0 || !st.Agents[0].PerAgentKeys {
		t.Errorf("after the refused reload the agent is not serving on its per-agent key: %+v", st.Agents)
	}
}
