package sdn_test

import (
	"crypto/tls"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/sdn"
	"github.com/sosappliance/sosappliance/sdn/flows"
	"github.com/sosappliance/sosappliance/sdn/ofp13"
	"github.com/sosappliance/sosappliance/sdn/ovstest"
)

// guarded is a real Open vSwitch bridge converged by a controller, and
// what the test needs to prove later that its session survived.
type guarded struct {
	inst    *ovstest.Instance
	ctl     *running
	br      *ovstest.Bridge
	addr    string // where the controller listens, in the switch's namespace
	desired []flows.Flow
	since   time.Time
	conns   uint64
}

// startGuarded starts Open vSwitch, runs setup on it (nil for none), and
// points a bridge for sw at the controller with target(addr).
func startGuarded(t *testing.T, cfg sdn.Config, sw flows.Switch, target func(addr string) string, setup func(*ovstest.Instance), others ...flows.Switch) *guarded {
	t.Helper()
	inst := ovstest.Start(t)
	if setup != nil {
		setup(inst)
	}
	ln, err := inst.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &guarded{inst: inst, addr: ln.Addr().String()}
	cfg.Listener = ln
	cfg.Keepalive, cfg.HealthInterval, cfg.ResyncInterval = time.Second, time.Second, 500*time.Millisecond
	cfg.Switches = append([]flows.Switch{sw}, others...)
	g.ctl = startController(t, cfg)
	g.br = inst.AddBridge(t, "brg", sw.DatapathID, target(g.addr))
	st := waitConverged(t, g.ctl.Controller, sw.Name, 0)
	g.desired = compile(t, sw)
	requireSameFlows(t, g.br, g.desired)
	g.since, g.conns = st.ConnectedSince, g.ctl.Status().Counters.Connections
	return g
}

// requireUntouched checks that the real switch kept its session through
// the attack and that the session still converges it.
func (g *guarded) requireUntouched(t *testing.T, name string) {
	t.Helper()
	st := switchStatus(g.ctl.Controller, name)
	if !st.Connected || !st.ConnectedSince.Equal(g.since) {
		t.Fatalf("the real switch lost its session: %+v (connected since %v before)", st, g.since)
	}
	if n := g.ctl.Status().Counters.Connections; n != g.conns {
		t.Fatalf("connections went from %d to %d: an impostor got a session", g.conns, n)
	}
	requireSameFlows(t, g.br, g.desired)
	requireRepairs(t, g.br, g.desired)
	// OVS writes is_connected to its database a little later.
	testsupport.Eventually(t, 30*time.Second, "Open vSwitch to report its controller connection up", func() bool {
		ok, err := g.br.Connected()
		return err == nil && ok
	})
}

// TestImpostorRefusedAtTLS runs the real Open vSwitch over TLS with
// certificates from the switch CA, then lets impostors claim its datapath
// id: over plain TCP, over TLS without a certificate, with one from
// another CA, and, holding a good certificate, while the switch is
// connected. Each is refused before any flow is read or written, and the
// switch keeps its session and its flows.
func TestImpostorRefusedAtTLS(t *testing.T) {
	t.Parallel() // its own controller (and Open vSwitch, in a namespace of its own); mostly waiting (see the Makefile's -parallel)
	ovstest.Require(t, ovstest.Binaries...)
	dir := t.TempDir()
	ca := testsupport.NewPKI(t, dir, "switchca")
	ctlCert, ctlKey, _ := ca.Issue(t, "controller")
	swCert, swKey, swPair := ca.Issue(t, "switch")
	rogue := testsupport.NewPKI(t, dir, "rogueca")
	_, _, roguePair := rogue.Issue(t, "rogue")
	serverTLS, err := sdn.LoadTLS(ctlCert, ctlKey, ca.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	sw := siteSwitch(0xc1)
	sw.TLS = true
	g := startGuarded(t, sdn.Config{TLS: serverTLS}, sw, func(addr string) string { return "ssl:" + addr },
		func(inst *ovstest.Instance) {
			// As an operator would: the switch's key and certificate, and
			// the CA that signed the controller's.
			if _, err := inst.Vsctl("set-ssl", swKey, swCert, ca.CAFile); err != nil {
				t.Fatal(err)
			}
		})
	if st := switchStatus(g.ctl.Controller, "sw-a"); !st.Connected {
		t.Fatalf("the switch is not connected over TLS: %+v", st)
	}

	clientTLS := func(certs ...tls.Certificate) *tls.Config {
		return &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1",
			// Present the certificate whatever CAs the controller asks for.
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
				if len(certs) == 0 {
					return &tls.Certificate{}, nil
				}
				return &certs[0], nil
			}}
	}
	cases := []struct {
		name   string
		tls    *tls.Config // nil: plain TCP
		reason string
	}{
		{"plain TCP", nil, "every switch that connects here requires TLS"},
		{"TLS without a certificate", clientTLS(), "TLS handshake"},
		{"TLS with a certificate from another CA", clientTLS(roguePair), "certificate signed by unknown authority"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := refusedWith(g.ctl.Controller, c.reason)
			conn := dialIn(t, g.inst, "127.0.0.1", g.addr)
			if c.tls != nil {
				conn = tls.Client(conn, c.tls)
			}
			got, err := claimDatapath(conn, sw.DatapathID)
			if err == nil || len(got) != 0 {
				t.Fatalf("impostor completed a handshake (%v) and received %v", err, got)
			}
			t.Logf("impostor refused: %v", err)
			testsupport.Eventually(t, 30*time.Second, "the refusal to be recorded", func() bool {
				return refusedWith(g.ctl.Controller, c.reason) > before
			})
		})
	}
	t.Run("a good certificate for a connected datapath id", func(t *testing.T) {
		conn := tls.Client(dialIn(t, g.inst, "127.0.0.1", g.addr), clientTLS(swPair))
		got, err := claimDatapath(conn, sw.DatapathID)
		if err != nil {
			t.Fatalf("handshake with a good certificate: %v", err)
		}
		got = append(got, untilHangUp(t, conn)...)
		requireNoPolicy(t, "the second connection", got)
		// The refusal is recorded as the connection closes, not before.
		testsupport.Eventually(t, 10*time.Second, "the refusal to be recorded", func() bool {
			return refusedWith(g.ctl.Controller, "is already connected") > 0
		})
	})
	g.requireUntouched(t, "sw-a")
}

// TestImpostorOutsideAllowList: a host that is on no switch's allow list
// is hung up on before the controller sends a byte; one on another
// switch's list that claims this switch's datapath id is refused after the
// features reply, before any flow is read or written.
func TestImpostorOutsideAllowList(t *testing.T) {
	t.Parallel() // its own controller (and Open vSwitch, in a namespace of its own); mostly waiting (see the Makefile's -parallel)
	ovstest.Require(t, ovstest.Binaries...)
	sw := siteSwitch(0xc2)
	sw.Allow = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	other := flows.Switch{Name: "sw-b", DatapathID: 0xc3, Forwarding: "normal",
		Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.3/32")}}
	g := startGuarded(t, sdn.Config{}, sw, func(addr string) string { return "tcp:" + addr }, nil, other)

	t.Run("from an address on no allow list", func(t *testing.T) {
		conn := dialIn(t, g.inst, "127.0.0.2", g.addr)
		// Read before writing anything: the controller speaks first
		// (hello) to anyone it accepts.
		got := untilHangUp(t, conn)
		if len(got) != 0 {
			t.Fatalf("the controller sent %v to a source on no allow list", got)
		}
		// The refusal is recorded as the connection closes, not before.
		testsupport.Eventually(t, 10*time.Second, "the refusal to be recorded", func() bool {
			return refusedWith(g.ctl.Controller, "on no switch's allow list") > 0
		})
	})
	t.Run("from another switch's address", func(t *testing.T) {
		conn := dialIn(t, g.inst, "127.0.0.3", g.addr)
		got, err := claimDatapath(conn, sw.DatapathID)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, untilHangUp(t, conn)...)
		requireNoPolicy(t, "the impostor", got)
		// The refusal is recorded as the connection closes, not before.
		testsupport.Eventually(t, 10*time.Second, "the refusal to be recorded", func() bool {
			return refusedWith(g.ctl.Controller, "may not connect from 127.0.0.3") > 0
		})
	})
	g.requireUntouched(t, "sw-a")
}

// TestSecondConnectionForConnectedSwitch: on plain TCP from an allowed
// address, a second connection that claims the datapath id of a connected
// switch is refused and logged; the first keeps its session.
func TestSecondConnectionForConnectedSwitch(t *testing.T) {
	t.Parallel() // its own controller (and Open vSwitch, in a namespace of its own); mostly waiting (see the Makefile's -parallel)
	ovstest.Require(t, ovstest.Binaries...)
	sw := siteSwitch(0xc4)
	g := startGuarded(t, sdn.Config{}, sw, func(addr string) string { return "tcp:" + addr }, nil)
	for range 3 {
		conn := dialIn(t, g.inst, "127.0.0.1", g.addr)
		got, err := claimDatapath(conn, sw.DatapathID)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, untilHangUp(t, conn)...)
		requireNoPolicy(t, "the second connection", got)
		for _, typ := range got {
			if typ != ofp13.TypeHello && typ != ofp13.TypeFeaturesRequest && typ != ofp13.TypeEchoRequest {
				t.Fatalf("the second connection received %s", typ)
			}
		}
	}
	testsupport.Eventually(t, 10*time.Second, "three refusals to be recorded", func() bool {
		return refusedWith(g.ctl.Controller, "is already connected") >= 3
	})
	if n := refusedWith(g.ctl.Controller, "is already connected"); n != 3 {
		t.Fatalf("%d refusals recorded, want 3: %+v", n, g.ctl.Status().Refused)
	}
	if !strings.Contains(g.ctl.logs.String(), "a second connection for its datapath id is refused") {
		t.Fatalf("refusal not logged:\n%s", g.ctl.logs)
	}
	g.requireUntouched(t, "sw-a")
}
