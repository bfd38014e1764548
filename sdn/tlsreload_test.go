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
	t.Parallel() // its own controller (and Open vSwitch, in a namespace of its own); mostly waiting (see the Makefile's -parallel)
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
	if changed, dropped, err := g.ctl.SetTLS(load(bundle)); !changed || dropped != 0 || err != nil {
		t.Fatalf("SetTLS with a new certificate and both CAs: changed %v, dropped %d, %v", changed, dropped, err)
	}
	if changed, dropped, err := g.ctl.SetTLS(load(bundle)); changed || dropped != 0 || err != nil {
		t.Errorf("SetTLS with the same files read again: changed %v, dropped %d, %v", changed, dropped, err)
	}
	if _, _, err := g.ctl.SetTLS(nil); err == nil {
		t.Error("SetTLS(nil) turned TLS off in a running controller")
	}
	if !served(oldPair) || !served(newPair) {
		t.Errorf("with both CAs in force: old CA's switch served %v, new CA's %v; want both", served(oldPair), served(newPair))
	}
	g.requireUntouched(t, sw.Name)

	// The new CA alone: the switch on its old certificate goes.
	if changed, dropped, err := g.ctl.SetTLS(load(newCA.CAFile)); !changed || dropped != 1 || err != nil {
		t.Fatalf("SetTLS with the new CA alone: changed %v, dropped %d (want the one switch), %v", changed, dropped, err)
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

// TestReloadDropsExpiredSwitch: a switch whose certificate expires while it
// is connected is dropped by the next reload, even one that changes no
// file (SetTLS with the same files), with the reason in its status.
func TestReloadDropsExpiredSwitch(t *testing.T) {
	// Not parallel: its certificate expires 8 s after issue: the start must not wait behind seven others.
	ovstest.Require(t, ovstest.Binaries...)
	ca := testsupport.NewPKI(t, t.TempDir(), "switchca")
	ctlCert, ctlKey, _ := ca.Issue(t, "controller")
	expires := time.Now().Add(8 * time.Second)
	swCert, swKey, _ := ca.IssueUntil(t, "switch", expires)
	load := func() *tls.Config {
		t.Helper()
		conf, err := sdn.LoadTLS(ctlCert, ctlKey, ca.CAFile)
		if err != nil {
			t.Fatal(err)
		}
		return conf
	}
	sw := siteSwitch(0xc8)
	sw.TLS = true
	g := startGuarded(t, sdn.Config{TLS: load()}, sw, func(addr string) string { return "ssl:" + addr },
		func(inst *ovstest.Instance) {
			if _, err := inst.Vsctl("set-ssl", swKey, swCert, ca.CAFile); err != nil {
				t.Fatal(err)
			}
		})
	if changed, dropped, err := g.ctl.SetTLS(load()); changed || dropped != 0 || err != nil {
		t.Fatalf("a reload before the certificate expired: changed %v, dropped %d, %v", changed, dropped, err)
	}
	time.Sleep(time.Until(expires) + time.Second)
	if changed, dropped, err := g.ctl.SetTLS(load()); changed || dropped != 1 || err != nil {
		t.Fatalf("a reload after the switch's certificate expired: changed %v, dropped %d (want 1), %v", changed, dropped, err)
	}
	if st := switchStatus(g.ctl.Controller, sw.Name); st.Connected || !strings.Contains(st.LastError, "expired") {
		t.Errorf("the switch with an expired certificate: %+v", st)
	}
}
