package appliance

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/dataplane/stripe"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestReloadTakesPSKReplacedInPlace: a psk_file replaced under the same
// path is taken by the next reload although sos.hcl is not edited
// (SIGHUP, `systemctl reload`), as the controller's TLS files are. Before,
// such a reload said "unchanged" and the agent kept authenticating with
// the old PSK until the daemon restarted: a rotation done on every node
// left the fleet on the old key, and a restart of one node then cut it
// off from the others. Checked on the wire: a far agent's hello keyed
// with the new PSK gets an authenticated answer, one keyed with the old
// PSK none. A file replaced with something that is not a key refuses the
// reload and the agent keeps the key it runs with.
func TestReloadTakesPSKReplacedInPlace(t *testing.T) {
	if !testsupport.InFreshNetns(t, "ip", "nft") {
		return
	}
	n := newReloadNode(t)
	// The far agent b1 dials from its own address.
	cmdOut(t, "ip", "addr", "add", "10.2.0.2/32", "dev", "eth1p")
	writeFile(t, n.cfgPath, n.config(reloadEdit{rmemMax: "100000", controllerPort: 6653, dataPort: 9877}))
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	d := n.daemonWith(metricsAddr)
	ctx := runDaemon(t, d, n.logs)
	testsupport.Eventually(t, 15*time.Second, "start-up", func() bool {
		return d.Status().Serial == 1 && listens("10.1.0.2:9877")
	})
	oldPSK, err := LoadPSK(n.psk)
	testsupport.RequireNoError(t, err)

	// answered says whether agent a1 answers a pooled hello of b1 keyed
	// with psk with a reply that psk authenticates.
	answered := func(psk []byte) bool {
		t.Helper()
		key, err := stripe.NewHandshakeKey(psk)
		testsupport.RequireNoError(t, err)
		eph, err := stripe.NewEphemeral(rand.Reader)
		testsupport.RequireNoError(t, err)
		hello := stripe.Hello{Mode: stripe.ModeAESGCM, Initiator: "b1", Responder: "a1", Ephemeral: eph.Public(), Pool: true}
		hb, err := hello.Marshal(key)
		testsupport.RequireNoError(t, err)
		dialer := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP("10.2.0.2")}}
		c, err := dialer.Dial("tcp", "10.1.0.2:9877")
		testsupport.RequireNoError(t, err)
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write(hb[:]); err != nil {
			return false
		}
		rb := make([]byte, stripe.ReplySize)
		if _, err := io.ReadFull(c, rb); err != nil {
			if os.IsTimeout(err) {
				t.Fatal("agent a1 neither answered nor closed a hello in 10 s")
			}
			return false
		}
		_, err = stripe.ParseReply(hb[:], rb, key)
		return err == nil
	}
	if !answered(oldPSK) {
		t.Fatal("agent a1 does not answer a hello keyed with the PSK it started with")
	}
	// shows says whether status, the metrics and the status the node
	// publishes to a cluster name the PSK id of psk alone.
	shows := func(psk []byte) bool {
		t.Helper()
		id := PSKID(psk)
		resp, err := http.Get("http://" + metricsAddr + "/metrics")
		testsupport.RequireNoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		series := parseScrape(string(body))["sosappliance_psk_info"]
		st := d.Status()
		var text bytes.Buffer
		st.WriteText(&text)
		return slices.Equal(st.PSKIDs, []string{id}) && slices.Equal(d.publishedStatus().PSKIDs, []string{id}) &&
			len(series) == 1 && series[0]["psk_id"] == id && regexp.MustCompile(`(?m)^psk id: +`+id+`$`).MatchString(text.String())
	}
	if !shows(oldPSK) {
		t.Errorf("status and metrics do not name the PSK the agent started with (%s): %v", PSKID(oldPSK), d.Status().PSKIDs)
	}

	// Rotated in place, config not edited.
	writeFile(t, n.psk, strings.Repeat("c3", 32)+"\n")
	newPSK, err := LoadPSK(n.psk)
	testsupport.RequireNoError(t, err)
	d.reload(ctx)
	st := d.Status()
	if st.LastReload == nil || !strings.Contains(st.LastReload.Result, "took a replaced psk_file of a1") {
		t.Errorf("the reload after the PSK file was replaced: %+v, want it to say it took the psk_file", st.LastReload)
	}
	if !answered(newPSK) {
		t.Error("after the reload, agent a1 does not answer a hello keyed with the replaced PSK")
	}
	if answered(oldPSK) {
		t.Error("after the reload, agent a1 still answers a hello keyed with the PSK it replaced")
	}
	if !shows(newPSK) {
		t.Errorf("status and metrics do not name the replaced PSK (%s): %v", PSKID(newPSK), d.Status().PSKIDs)
	}
	if !strings.Contains(n.logs.String(), "the agents' PSK changed") {
		t.Error("the reload that took the replaced PSK did not log the new PSK id")
	}
	if !strings.Contains(n.logs.String(), "psk_file replaced in place") {
		t.Error("the reload that took the replaced PSK did not log it")
	}

	// Nothing replaced: unchanged, as before.
	d.reload(ctx)
	if st := d.Status(); st.LastReload == nil || st.LastReload.Result != "unchanged" {
		t.Errorf("a reload with nothing replaced: %+v, want unchanged", st.LastReload)
	}

	// Replaced with something that is not a key: refused, and the key in
	// force stays.
	writeFile(t, n.psk, "a passphrase\n")
	fails := d.Status().ReloadFails
	d.reload(ctx)
	st = d.Status()
	if st.ReloadFails != fails+1 || st.LastReload == nil || !strings.Contains(st.LastReload.Result, "still running the last good config") {
		t.Errorf("a reload with a PSK file that holds no key: %d failures (was %d), %+v", st.ReloadFails, fails, st.LastReload)
	}
	if !answered(newPSK) {
		t.Error("after a refused reload, agent a1 no longer answers a hello keyed with the PSK in force")
	}
	if !shows(newPSK) {
		t.Errorf("after a refused reload, status and metrics do not name the PSK in force (%s): %v", PSKID(newPSK), d.Status().PSKIDs)
	}
}

// TestPSKID: the id tells keys apart, is stable (a golden value, so that
// nodes of different versions show the same id for one key) and is not a
// prefix of the key.
func TestPSKID(t *testing.T) {
	a := bytes.Repeat([]byte{0x5a}, 32)
	b := bytes.Repeat([]byte{0xc3}, 32)
	if PSKID(a) == PSKID(b) {
		t.Errorf("two PSKs share the id %s", PSKID(a))
	}
	if got := PSKID(a); len(got) != 8 || strings.HasPrefix(hex.EncodeToString(a), got) {
		t.Errorf("PSKID = %q, want 8 hex digits that are not the key's", got)
	}
	// The golden value is HKDF-SHA256 (RFC 5869) worked by hand: zero
	// salt, info "sosappliance psk id", 4 bytes.
	if got, want := PSKID(a), "d8d388f4"; got != want {
		t.Errorf("PSKID of 32 bytes 0x5a = %s, want %s", got, want)
	}
}
