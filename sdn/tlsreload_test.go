package sdn_test

import (
	"crypto/tls"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/sdn"
	"github.com/sosappliance/sosappliance/sdn/ovstest"
)

// TestSetTLSTakesNewFilesForNewConnections runs the real Open vSwitch over
// TLS, then gives the controller TLS files replaced in place, from a new
// switch CA, as an operator rotating certificates would. The connected
// switch keeps its session and flows; a connection presenting a
// certificate of the old CA is refused from then on, and one of the new
// CA is served the new controller certificate.
func TestSetTLSTakesNewFilesForNewConnections(t *testing.T) {
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
	_, _, newPair := newCA.Issue(t, "switch")
	newTLS, err := sdn.LoadTLS(ctlCert2, ctlKey2, newCA.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	if changed, err := g.ctl.SetTLS(newTLS); !changed || err != nil {
		t.Fatalf("SetTLS with a new certificate and CA: changed %v, %v", changed, err)
	}
	again, err := sdn.LoadTLS(ctlCert2, ctlKey2, newCA.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	if changed, err := g.ctl.SetTLS(again); changed || err != nil {
		t.Errorf("SetTLS with the same files read again: changed %v, %v", changed, err)
	}
	if _, err := g.ctl.SetTLS(nil); err == nil {
		t.Error("SetTLS(nil) turned TLS off in a running controller")
	}

	before := refusedWith(g.ctl.Controller, "certificate signed by unknown authority")
	old := tls.Client(dialIn(t, g.inst, "127.0.0.1", g.addr), &tls.Config{RootCAs: newCA.Pool(), ServerName: "127.0.0.1",
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &oldPair, nil }})
	if got, err := claimDatapath(old, 0xdead); err == nil || len(got) != 0 {
		t.Fatalf("a certificate of the replaced CA completed a handshake (%v) and received %v", err, got)
	}
	testsupport.Eventually(t, 30*time.Second, "the old CA's certificate to be refused", func() bool {
		return refusedWith(g.ctl.Controller, "certificate signed by unknown authority") > before
	})
	fresh := tls.Client(dialIn(t, g.inst, "127.0.0.1", g.addr), newCA.ClientTLS(newPair))
	_ = fresh.SetDeadline(time.Now().Add(10 * time.Second))
	if err := fresh.Handshake(); err != nil {
		t.Fatalf("a certificate of the new CA, verifying the controller with the new CA: %v", err)
	}
	if got := fresh.ConnectionState().PeerCertificates[0].Issuer.CommonName; got != "newca" {
		t.Errorf("the controller presented a certificate issued by %q, want newca", got)
	}
	fresh.Close()
	g.requireUntouched(t, sw.Name)
}
