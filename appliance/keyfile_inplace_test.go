package appliance

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestReloadRefusesKeyFileReplacedInPlace: a1's key_file replaced under
// the same path by another key (keygen to the same path after a remove),
// sos.hcl untouched, then a reload: the key is not the public_key the file
// names, so the reload is refused with that reason and the agent keeps
// its key (a new key takes an edit of public_key on every node). Found by
// review (helper-41): the first version of the unedited reload's key
// re-read said it took a key_file replaced in place, which it never can.
func TestReloadRefusesKeyFileReplacedInPlace(t *testing.T) {
	if !testsupport.InFreshNetns(t, "ip", "nft") {
		return
	}
	n := newReloadNode(t)
	ownFile, otherFile := filepath.Join(n.dir, "a1.key"), filepath.Join(n.dir, "b1.key")
	ownPub, err := WriteAgentKey(ownFile)
	testsupport.RequireNoError(t, err)
	otherPub, err := WriteAgentKey(otherFile)
	testsupport.RequireNoError(t, err)
	cfg := n.config(reloadEdit{rmemMax: "100000", controllerPort: 6653, dataPort: 9877})
	cfg = strings.Replace(cfg, "agent \"a1\" {\n", fmt.Sprintf("agent \"a1\" {\n    public_key = %q\n    key_file = %q\n", ownPub, ownFile), 1)
	cfg = strings.Replace(cfg, "agent \"b1\" {\n", fmt.Sprintf("agent \"b1\" {\n    public_key = %q\n", otherPub), 1)
	writeFile(t, n.cfgPath, cfg)
	d := n.daemon()
	ctx := runDaemon(t, d, n.logs)
	testsupport.Eventually(t, 15*time.Second, "start-up with the agent's key", func() bool {
		return d.Status().Serial == 1 && listens("10.1.0.2:9877")
	})

	// Replaced in place, sos.hcl not edited.
	testsupport.RequireNoError(t, os.Remove(ownFile))
	_, err = WriteAgentKey(ownFile)
	testsupport.RequireNoError(t, err)
	fails := d.Status().ReloadFails
	d.reload(ctx)
	st := d.Status()
	if st.ReloadFails != fails+1 || st.LastReload == nil || !strings.Contains(st.LastReload.Result, "is not agent a1's") {
		t.Errorf("an unedited reload after a1's key_file was replaced by another key: %d failures (was %d), %+v; want it refused, naming the key", st.ReloadFails, fails, st.LastReload)
	}
	if !listens("10.1.0.2:9877") {
		t.Error("the agent stopped serving after the refused reload")
	}
	if !st.Agents[0].PerAgentKeys {
		t.Errorf("after the refused reload the agent says %+v, want it still on per-agent keys", st.Agents[0])
	}
}
