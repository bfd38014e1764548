package sdn_test

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/sdn"
	"github.com/sosappliance/sosappliance/sdn/ovstest"
)

// TestSetTLSRotatesTheSwitchCA rotates the switch CA under the real Open
// vSwitch connected over TLS, as an operator would with files replaced in
// place: first a ca_file holding the old and the new CA, with a controller
// certificate of the new one (the connected switch keeps its session, and
// switches of either CA are served), then the new CA alone. That drops
// the switch still on its old certificate, says why in its status, and
// refuses the old CA's certificates from then on; given a certificate of
// the new CA, the switch connects again and converges.
func TestSetTLSRotatesTheSwitchCA(t *testing.T) {
	ovstest.Require(t, ovstest.Binaries...)
	dir := t.TempDir()
	oldCA := testsupport.NewPKI(t, dir, "oldca")
	ctlCert, ctlKey, _ := oldCA.Issue(t, "controller")
	swCert, swKey, oldPair := oldCA.Issue(t, "switch")
	oldTLS, err := sdn.LoadTLS(ctlCert, ctlKey, oldCA.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	sw := siteSwitch(0xc7)
	sw.TLS = true
	g := startGuarded(t, sdn.Config{TLS: oldTLS}, sw, func(addr string) string { return "ssl:" + addr },
		func(inst *ovstest.Instance) {
			if _, err := inst.Vsctl("set-ssl", swKey, swCert, oldCA.CAFile); err != nil {
				t.Fatal(err)
			}
		})

	newCA := testsupport.NewPKI(t, t.TempDir(), "newca")
	ctlCert2, ctlKey2, _ := newCA.Issue(t, "controller")
	swCert2, swKey2, newPair := newCA.Issue(t, "switch")
	load := func(caFile string) *tls.Config {
		t.Helper()
		conf, err := sdn.LoadTLS(ctlCert2, ctlKey2, caFile)
		if err != nil {
			t.Fatal(err)
		}
		return conf
	}
	// served says whether the controller completes the TLS handshake of
	// a switch presenting pair and sends it its OpenFlow hello.
	served := func(pair tls.Certificate) bool {
		c := tls.Client(dialIn(t, g.inst, "127.0.0.1", g.addr), &tls.Config{RootCAs: newCA.Pool(), ServerName: "127.0.0.1",
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &pair, nil }})
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		_, err := c.Read(make([]byte, 8))
		return err == nil
	}

	// Both CAs in ca_file.
	bundle := filepath.Join(dir, "both-cacert.pem")
	var both []byte
	for _, f := range []string{oldCA.CAFile, newCA.CAFile} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		both = append(both, b...)
	}
	if err := os.WriteFile(bundle, both, 0o600); err != nil {
		t.Fatal(err)
	}
	if changed, err := g.ctl.SetTLS(load(bundle)); !changed || err != nil {
		t.Fatalf("SetTLS with a new certificate and both CAs: changed %v, %v", changed, err)
	}
	if changed, err := g.ctl.SetTLS(load(bundle)); changed || err != nil {
		t.Errorf("SetTLS with the same files read again: changed %v, %v", changed, err)
	}
	if _, err := g.ctl.SetTLS(nil); err == nil {
		t.Error("SetTLS(nil) turned TLS off in a running controller")
	}
	if !served(oldPair) || !served(newPair) {
		t.Errorf("with both CAs in force: old CA's switch served %v, new CA's %v; want both", served(oldPair), served(newPair))
	}
	g.requireUntouched(t, sw.Name)

	// The new CA alone: the switch on its old certificate goes.
	if changed, err := g.ctl.SetTLS(load(newCA.CAFile)); !changed || err != nil {
		t.Fatalf("SetTLS with the new CA alone: changed %v, %v", changed, err)
	}
	st := switchStatus(g.ctl.Controller, sw.Name)
	if st.Connected || !strings.Contains(st.LastError, "does not verify against the switch CA in force") {
		t.Errorf("the switch on a certificate of the removed CA: %+v, want it dropped with the reason", st)
	}
	if served(oldPair) {
		t.Error("a certificate of the removed CA is still served")
	}
	if !served(newPair) {
		t.Error("a certificate of the new CA is not served")
	}
	conns := g.ctl.Status().Counters.Connections
	if _, err := g.inst.Vsctl("set-ssl", swKey2, swCert2, newCA.CAFile); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, 60*time.Second, "the switch to connect again on its new certificate", func() bool {
		st := switchStatus(g.ctl.Controller, sw.Name)
		return st.Connected && g.ctl.Status().Counters.Connections > conns
	})
	requireSameFlows(t, g.br, g.desired)
}
