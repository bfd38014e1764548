package sdn_test

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/sdn"
	"github.com/sosappliance/sosappliance/sdn/flows"
	"github.com/sosappliance/sosappliance/sdn/ovstest"
)

// TestCertificateMustNameTheSwitch: any certificate of the switch CA could
// claim any datapath id, so one switch's certificate (or one issued to any
// host) could take the place of another switch while it was disconnected
// and keep it out. With tls_name the certificate must name the switch: the
// real Open vSwitch with an ovs-pki style certificate ("sw-a id:UUID")
// connects and converges, and the CA's certificates for other names
// claiming a disconnected switch's datapath id are refused before any
// flow is written; one naming that switch gets its session.
func TestCertificateMustNameTheSwitch(t *testing.T) {
	t.Parallel() // its own controller (and Open vSwitch, in a namespace of its own); mostly waiting (see the Makefile's -parallel)
	ovstest.Require(t, ovstest.Binaries...)
	ca, serverTLS := controllerPKI(t)
	swCert, swKey, swPair := ca.Issue(t, "sw-a id:5f0c9a8e-2d4b-4c1e-9a57-3e8f6b1d2c40")
	_, _, prefixPair := ca.Issue(t, "sw-b2")
	_, _, bPair := ca.Issue(t, "sw-b")
	sw := siteSwitch(0xc7)
	sw.TLS, sw.TLSName = true, "sw-a"
	other := flows.Switch{Name: "sw-b", DatapathID: 0xc8, Forwarding: "normal", TLS: true, TLSName: "sw-b"}
	g := startGuarded(t, sdn.Config{TLS: serverTLS}, sw, func(addr string) string { return "ssl:" + addr },
		func(inst *ovstest.Instance) {
			if _, err := inst.Vsctl("set-ssl", swKey, swCert, ca.CAFile); err != nil {
				t.Fatal(err)
			}
		}, other)
	for _, c := range []struct {
		name string
		pair tls.Certificate
	}{
		{"switch sw-a's own certificate", swPair},
		{"a certificate whose name only starts with the switch's", prefixPair},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := refusedWith(g.ctl.Controller, "does not name \"sw-b\"")
			conn := tls.Client(dialIn(t, g.inst, "127.0.0.1", g.addr), ca.ClientTLS(c.pair))
			got, err := claimDatapath(conn, other.DatapathID)
			if err != nil {
				t.Fatalf("handshake: %v", err)
			}
			got = append(got, untilHangUp(t, conn)...)
			requireNoPolicy(t, "the impostor", got)
			testsupport.Eventually(t, 10*time.Second, "the refusal to be recorded", func() bool {
				return refusedWith(g.ctl.Controller, "does not name \"sw-b\"") > before
			})
			if st := switchStatus(g.ctl.Controller, "sw-b"); st.Connected {
				t.Fatalf("the impostor holds switch sw-b's session: %+v", st)
			}
		})
	}
	g.requireUntouched(t, "sw-a")
	t.Run("a certificate naming the switch", func(t *testing.T) {
		conn := tls.Client(dialIn(t, g.inst, "127.0.0.1", g.addr), ca.ClientTLS(bPair))
		defer conn.Close()
		if _, err := claimDatapath(conn, other.DatapathID); err != nil {
			t.Fatalf("handshake: %v", err)
		}
		testsupport.Eventually(t, 30*time.Second, "switch sw-b to be connected", func() bool {
			return switchStatus(g.ctl.Controller, "sw-b").Connected
		})
		// A reload that names another certificate drops the session.
		renamed := other
		renamed.TLSName = "sw-b-new"
		if err := g.ctl.Update([]flows.Switch{sw, renamed}, nil); err != nil {
			t.Fatal(err)
		}
		testsupport.Eventually(t, 30*time.Second, "switch sw-b's session to be dropped", func() bool {
			return !switchStatus(g.ctl.Controller, "sw-b").Connected
		})
		if !switchStatus(g.ctl.Controller, "sw-a").Connected {
			t.Error("the reload dropped switch sw-a, whose certificate still names it")
		}
	})
}

// TestOneShotCertificateMustNameTheSwitch: the wait of `plan` and `apply`
// for a switch that dials in checks tls_name as the controller does: a
// certificate of the switch CA for another name that claims the datapath
// id first is refused, and the real switch is the one accepted.
func TestOneShotCertificateMustNameTheSwitch(t *testing.T) {
	ovstest.Require(t, ovstest.Binaries...)
	ca, serverTLS := controllerPKI(t)
	swCert, swKey, _ := ca.Issue(t, "bry id:0d9e3c1a-7f55-4b8e-a0c2-51f4e6a9b7d3")
	_, _, otherPair := ca.Issue(t, "brz")
	inst := ovstest.Start(t)
	if _, err := inst.Vsctl("set-ssl", swKey, swCert, ca.CAFile); err != nil {
		t.Fatal(err)
	}
	ln, err := inst.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const dpid = 0x0f
	type accepted struct {
		sc  *sdn.SwitchConn
		err error
	}
	done := make(chan accepted, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go func() {
		sc, err := sdn.AcceptSwitch(ctx, ln, flows.Switch{Name: "bry", DatapathID: dpid, TLS: true, TLSName: "bry"},
			serverTLS, sdn.ConnOptions{HandshakeTimeout: 5 * time.Second})
		done <- accepted{sc, err}
	}()
	impostor := tls.Client(dialIn(t, inst, "127.0.0.1", ln.Addr().String()), ca.ClientTLS(otherPair))
	defer impostor.Close()
	// The wait knows its switch, so it hangs up right after TLS, before
	// the OpenFlow handshake.
	got, err := claimDatapath(impostor, dpid)
	if err == nil {
		got = append(got, untilHangUp(t, impostor)...)
	}
	t.Logf("impostor: %v, received %v", err, got)
	requireNoPolicy(t, "the impostor", got)
	select {
	case a := <-done:
		t.Fatalf("the wait ended with the impostor's connection: %v", a.err)
	default:
	}
	inst.AddBridge(t, "bry", dpid, "ssl:"+ln.Addr().String())
	a := <-done
	if a.err != nil {
		t.Fatalf("the real switch was not accepted: %v", a.err)
	}
	defer a.sc.Close()
	if a.sc.RemoteAddr() == impostor.LocalAddr().String() {
		t.Fatalf("accepted the impostor (%s)", a.sc.RemoteAddr())
	}
	if a.sc.Features().NTables == 0 {
		t.Fatalf("accepted %+v", a.sc.Features())
	}
}

// controllerPKI makes a switch CA in a temporary directory, issues the
// controller's certificate from it and returns the CA and the
// controller's TLS configuration (sdn.LoadTLS).
func controllerPKI(t *testing.T) (*testsupport.PKI, *tls.Config) {
	t.Helper()
	ca := testsupport.NewPKI(t, t.TempDir(), "switchca")
	ctlCert, ctlKey, _ := ca.Issue(t, "controller")
	serverTLS, err := sdn.LoadTLS(ctlCert, ctlKey, ca.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	return ca, serverTLS
}
