package sdn_test

import (
	"crypto/tls"
	"net"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/sdn"
	"github.com/sosappliance/sosappliance/sdn/flows"
)

// TestReloadAddingTLSNameDuringAClaim: serveConn checks a connection
// against the configuration, then its claim may wait up to a keepalive
// (echoing a silent previous session) before the session is registered;
// Update checks only sessions already registered. A reload that adds
// tls_name meanwhile must still keep a certificate for another name out:
// the claim checks the configuration in force again. Found by review
// (before, "mallory" held switch sw-b's session after the reload).
func TestReloadAddingTLSNameDuringAClaim(t *testing.T) {
	t.Parallel() // its own controller (and Open vSwitch, in a namespace of its own); mostly waiting (see the Makefile's -parallel)
	ca, serverTLS := controllerPKI(t)
	_, _, realPair := ca.Issue(t, "sw-b")
	_, _, otherPair := ca.Issue(t, "mallory")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sw := flows.Switch{Name: "sw-b", DatapathID: 0xc8, Forwarding: "normal", TLS: true}
	ctl := startController(t, sdn.Config{TLS: serverTLS, Listener: ln, Keepalive: 3 * time.Second,
		HealthInterval: time.Second, Switches: []flows.Switch{sw}})
	dial := func(pair tls.Certificate) *tls.Conn {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		tc := tls.Client(c, ca.ClientTLS(pair))
		t.Cleanup(func() { tc.Close() })
		return tc
	}
	// The real switch connects, then goes silent (it lost power, say).
	real := dial(realPair)
	if _, err := claimDatapath(real, sw.DatapathID); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, 10*time.Second, "sw-b connected", func() bool {
		return switchStatus(ctl.Controller, "sw-b").Connected
	})
	// A certificate for another name claims the datapath id; the
	// controller Echoes the silent session for up to Keepalive.
	imp := dial(otherPair)
	if _, err := claimDatapath(imp, sw.DatapathID); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	// The operator's reload binds the switch to its certificate name.
	named := sw
	named.TLSName = "sw-b"
	if err := ctl.Update([]flows.Switch{named}, nil); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		st := switchStatus(ctl.Controller, "sw-b")
		if st.Connected && st.Remote == imp.LocalAddr().String() {
			t.Fatalf("after the reload set tls_name \"sw-b\", a certificate for \"mallory\" holds switch sw-b's session: %+v", st)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Kept out for its name, not by chance.
	if refusedWith(ctl.Controller, `the certificate of "mallory" does not name "sw-b"`) == 0 {
		t.Errorf("the impostor was not refused for its certificate's name: %+v", ctl.Status().Refused)
	}
}
