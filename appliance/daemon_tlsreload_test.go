package appliance

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestReloadTakesReplacedTLSFiles: the controller's certificate, key and
// switch CA replaced under the same paths are taken by the next reload,
// whether the file was edited or not (SIGHUP); switches that connect from
// then on get them. Files that do not load refuse the reload, with the
// file named in status, and the last good ones stay in force.
func TestReloadTakesReplacedTLSFiles(t *testing.T) {
	root, dir, pkiDir := tempHost(t), t.TempDir(), t.TempDir()
	certFile, keyFile, caFile := filepath.Join(pkiDir, "ctl-cert.pem"), filepath.Join(pkiDir, "ctl-key.pem"), filepath.Join(pkiDir, "ca.pem")
	// install puts a controller certificate from a fresh CA at the
	// configured paths, as an operator rotating them would, and returns
	// the CA and a switch certificate of it.
	install := func(name string) (*testsupport.PKI, tls.Certificate) {
		ca := testsupport.NewPKI(t, t.TempDir(), name)
		cert, key, _ := ca.Issue(t, "controller")
		_, _, sw := ca.Issue(t, "switch")
		for src, dst := range map[string]string{cert: certFile, key: keyFile, ca.CAFile: caFile} {
			b, err := os.ReadFile(src)
			testsupport.RequireNoError(t, err)
			testsupport.RequireNoError(t, os.WriteFile(dst, b, 0o600))
		}
		return ca, sw
	}
	first, firstSwitch := install("ca-one")

	port := freePort(t)
	listen := fmt.Sprintf("127.0.0.1:%d", port)
	cfg := strings.Replace(monitoringConfig(port, freePort(t)), "controller {",
		fmt.Sprintf("controller {\n  tls {\n    cert_file = %q\n    key_file  = %q\n    ca_file   = %q\n  }", certFile, keyFile, caFile), 1)
	d, logs, ctx := runControllerDaemon(t, root, dir, cfg)
	cfgPath := filepath.Join(dir, "sos.hcl")
	// issuer is the CA of the certificate the controller presents to a
	// switch of ca presenting pair, once the controller accepted it and
	// sent its OpenFlow hello ("" and the error otherwise).
	issuer := func(ca *testsupport.PKI, pair tls.Certificate) (string, error) {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", listen, ca.ClientTLS(pair))
		if err != nil {
			return "", err
		}
		defer c.Close()
		// Under TLS 1.3 the server's verdict on the client's certificate
		// comes after the client's handshake: the controller's OpenFlow
		// hello, or an alert.
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(c, make([]byte, 8)); err != nil {
			return "", err
		}
		return c.ConnectionState().PeerCertificates[0].Issuer.CommonName, nil
	}
	testsupport.Eventually(t, 15*time.Second, "the controller serving TLS with the first files", func() bool {
		got, err := issuer(first, firstSwitch)
		return err == nil && got == "ca-one"
	})

	// Replaced files and an edited config.
	second, secondSwitch := install("ca-two")
	writeFile(t, cfgPath, cfg+"\n# edited\n")
	testsupport.Eventually(t, 15*time.Second, "an edited config's reload to take the replaced files", func() bool {
		got, err := issuer(second, secondSwitch)
		return err == nil && got == "ca-two"
	})
	if _, err := issuer(second, firstSwitch); err == nil {
		t.Error("a switch certificate of the replaced CA was accepted after the reload")
	}
	if !strings.Contains(logs.String(), "controller TLS files changed") {
		t.Error("the reload that took new TLS files did not log it")
	}

	// Replaced files and no edit: SIGHUP's reload takes them too.
	third, thirdSwitch := install("ca-three")
	d.reload(ctx)
	if got, err := issuer(third, thirdSwitch); err != nil || got != "ca-three" {
		t.Errorf("after a reload without an edit, the controller presents a certificate of %q (%v), want ca-three", got, err)
	}

	// A certificate file that does not load refuses the reload; the files
	// in force stay.
	testsupport.RequireNoError(t, os.WriteFile(certFile, []byte("not a certificate\n"), 0o600))
	fails := d.Status().ReloadFails
	d.reload(ctx)
	st := d.Status()
	if st.ReloadFails != fails+1 || st.LastReload == nil || !strings.Contains(st.LastReload.Result, "controller certificate") {
		t.Errorf("a reload with a broken certificate file: %d failures (was %d), %+v", st.ReloadFails, fails, st.LastReload)
	}
	if got, err := issuer(third, thirdSwitch); err != nil || got != "ca-three" {
		t.Errorf("after a refused reload, the controller presents a certificate of %q (%v), want the last good one", got, err)
	}
}

// runControllerDaemon writes cfg as dir/sos.hcl and runs the daemon of
// node "ctl" over the temp host tree root until the test ends, logging
// into logs.
func runControllerDaemon(t *testing.T, root, dir, cfg string) (*Daemon, *testsupport.LockedBuffer, context.Context) {
	t.Helper()
	cfgPath := filepath.Join(dir, "sos.hcl")
	writeFile(t, cfgPath, cfg)
	logs := &testsupport.LockedBuffer{}
	off := ""
	d, err := NewDaemon(Options{
		ConfigPath: cfgPath, Node: "ctl", StatePath: filepath.Join(dir, "state.db"), ControlSocket: filepath.Join(dir, "control.sock"),
		MetricsListen: &off, Root: root, Executors: tempHostExecutors(root), Settle: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, nil)),
	})
	testsupport.RequireNoError(t, err)
	return d, logs, runDaemon(t, d, logs)
}
