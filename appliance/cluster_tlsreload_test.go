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

// TestReloadTakesRotatedEtcdCertificate: a controller node talks to an
// etcd that requires client certificates. Its certificate is replaced
// under the same paths shortly before the old one expires, and a reload
// without an edit (SIGHUP) takes it in place: no new etcd client, so no
// new election. After the old certificate expired and etcd restarted,
// the node publishes again and is master again, which it can only be
// with the new certificate. A CA file replaced in place is taken by the
// next reload with a new etcd client.
func TestReloadTakesRotatedEtcdCertificate(t *testing.T) {
	// Not parallel: its certificate expires 8 s after issue: the start must not wait behind seven others.
	one, two, bundle := testsupport.TwoCAs(t)
	pkiDir := t.TempDir()
	read := func(path string) []byte { return testsupport.ReadFile(t, path) }
	put := func(path string, b []byte) { testsupport.RequireNoError(t, os.WriteFile(path, b, 0o600)) }
	etcd := testsupport.StartEtcdTLS(t, 1, one, bundle)

	caFile, certFile, keyFile := filepath.Join(pkiDir, "etcd-ca.pem"), filepath.Join(pkiDir, "node.pem"), filepath.Join(pkiDir, "node-key.pem")
	install := func(cert, key string) {
		put(certFile, read(cert))
		put(keyFile, read(key))
	}
	put(caFile, read(one.CAFile))
	expires := time.Now().Add(8 * time.Second)
	cert, key, _ := one.IssueUntil(t, "ctl-old", expires)
	install(cert, key)

	root, dir := tempHost(t), t.TempDir()
	cfg := monitoringConfig(freePort(t), freePort(t)) + fmt.Sprintf(`
cluster {
  etcd      = [%q]
  prefix    = "/sos-tlsreload/"
  lease_ttl = "2s"
  tls {
    ca_file   = %q
    cert_file = %q
    key_file  = %q
  }
}
`, etcd.Endpoints()[0], caFile, certFile, keyFile)
	d, logs, ctx := runControllerDaemon(t, root, dir, cfg)
	master := func() bool {
		st := d.Status()
		return st.Cluster != nil && st.Cluster.Publishing && st.Cluster.Role == "master"
	}
	testsupport.Eventually(t, 20*time.Second, "master and publishing over TLS", master)
	takeovers := d.Status().Cluster.Takeovers

	newCert, newKey, _ := two.Issue(t, "ctl-new")
	install(newCert, newKey)
	d.reload(ctx)
	if !strings.Contains(logs.String(), "etcd TLS files changed") {
		t.Error("the reload that took a new etcd certificate did not log it")
	}
	if st := d.Status(); st.LastReload == nil || st.LastReload.Result != "unchanged" || st.Cluster.Takeovers != takeovers || st.Cluster.Role != "master" {
		t.Errorf("a reload without an edit: %+v, cluster %+v; want the same etcd client, still master", st.LastReload, st.Cluster)
	}

	time.Sleep(time.Until(expires) + time.Second)
	etcd.Kill()
	testsupport.Eventually(t, 20*time.Second, "the node cut off from etcd", func() bool { return !d.Status().Cluster.Publishing })
	etcd.Restart()
	testsupport.Eventually(t, 30*time.Second, "master and publishing again, with the new certificate", master)

	// The CA file replaced in place (both CAs now): the next reload,
	// without an edit, makes a new etcd client with it.
	put(caFile, read(bundle))
	d.reload(ctx)
	if st := d.Status(); st.LastReload == nil || st.LastReload.Result != "ok" {
		t.Errorf("a reload after the CA file was replaced: %+v", st.LastReload)
	}
	testsupport.Eventually(t, 30*time.Second, "master and publishing with the new CA file", master)
}
