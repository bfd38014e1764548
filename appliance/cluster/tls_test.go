package cluster

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestTLSReloadTakesRotatedClientCertificate runs an etcd that requires
// client certificates. A node's certificate is replaced under the same
// paths by one of another CA (the members trust both) shortly before the
// old one expires; Reload reads it, and once etcd restarts, the client
// reconnects with the new certificate, while a client that kept the old
// one is refused. A client whose CA did not sign the members' certificate
// is refused too. A CA replaced in place is not taken (SameCA says so:
// the daemon then makes a new client).
func TestTLSReloadTakesRotatedClientCertificate(t *testing.T) {
	t.Parallel() // its own etcd; mostly waiting (see the Makefile's -parallel)
	one, two, bundle := testsupport.TwoCAs(t)
	dir := t.TempDir()
	etcd := testsupport.StartEtcdTLS(t, 1, one, bundle)

	// install copies a certificate and key, and the members' CA, to the
	// files of a node.
	install := func(files TLSFiles, cert, key string) {
		for src, dst := range map[string]string{one.CAFile: files.CA, cert: files.Cert, key: files.Key} {
			b, err := os.ReadFile(src)
			testsupport.RequireNoError(t, err)
			testsupport.RequireNoError(t, os.WriteFile(dst, b, 0o600))
		}
	}
	filesIn := func(name string) TLSFiles {
		d := filepath.Join(dir, name)
		testsupport.RequireNoError(t, os.MkdirAll(d, 0o700))
		return TLSFiles{CA: filepath.Join(d, "ca.pem"), Cert: filepath.Join(d, "cert.pem"), Key: filepath.Join(d, "key.pem")}
	}
	expires := time.Now().Add(6 * time.Second)
	oldCert, oldKey, _ := one.IssueUntil(t, "node-old", expires)
	rotated, kept := filesIn("rotated"), filesIn("kept")
	install(rotated, oldCert, oldKey)
	install(kept, oldCert, oldKey)
	open := func(files TLSFiles) (*Client, *TLS) {
		tc, err := LoadTLS(files)
		testsupport.RequireNoError(t, err)
		cfg := testConfig(etcd, "node")
		cfg.TLS = tc
		cli, err := Open(cfg, slog.New(slog.DiscardHandler))
		testsupport.RequireNoError(t, err)
		t.Cleanup(func() { cli.Close() })
		return cli, tc
	}
	read := func(cli *Client) error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := cli.Statuses(ctx)
		return err
	}
	cli, tc := open(rotated)
	stale, _ := open(kept)
	for name, c := range map[string]*Client{"rotated": cli, "kept": stale} {
		testsupport.Eventually(t, 15*time.Second, name+" client reading etcd over TLS", func() bool { return read(c) == nil })
	}

	newCert, newKey, _ := two.Issue(t, "node-new")
	install(rotated, newCert, newKey)
	// As the daemon's reload does: read the files again and take the
	// certificate.
	fresh, err := LoadTLS(rotated)
	testsupport.RequireNoError(t, err)
	if !tc.SameCA(fresh) || !tc.Take(fresh) {
		t.Fatal("a fresh read of the replaced files was not taken")
	}
	if again, err := LoadTLS(rotated); err != nil || tc.Take(again) {
		t.Errorf("a second read of the same files: %v, or taken as changed", err)
	}
	time.Sleep(time.Until(expires) + time.Second)
	etcd.Kill()
	etcd.Restart()
	testsupport.Eventually(t, 20*time.Second, "the rotated client reconnecting with its new certificate", func() bool {
		return read(cli) == nil
	})
	if err := read(stale); err == nil {
		t.Error("a client presenting an expired certificate was served after etcd restarted")
	} else {
		t.Logf("the client that kept the old certificate: %v", err)
	}

	// A client that trusts another CA than the members' is refused.
	wrong := filesIn("wrong")
	install(wrong, newCert, newKey)
	caTwo, err := os.ReadFile(two.CAFile)
	testsupport.RequireNoError(t, err)
	testsupport.RequireNoError(t, os.WriteFile(wrong.CA, caTwo, 0o600))
	mistrust, _ := open(wrong)
	if err := read(mistrust); err == nil {
		t.Error("a client that does not trust the members' CA read etcd")
	} else if !strings.Contains(err.Error(), "deadline") && !strings.Contains(err.Error(), "certificate") {
		t.Logf("refused: %v", err)
	}

	// A fresh read of the same files has the same CA (the daemon then
	// takes its certificate in place); a CA replaced in place does not
	// (the daemon makes a new client).
	again, err := LoadTLS(rotated)
	testsupport.RequireNoError(t, err)
	if !tc.SameCA(again) || tc.Take(again) {
		t.Errorf("a fresh read of unchanged files: same CA %v, took a changed certificate %v", tc.SameCA(again), tc.Take(again))
	}
	testsupport.RequireNoError(t, os.WriteFile(rotated.CA, caTwo, 0o600))
	if again, err := LoadTLS(rotated); err != nil || tc.SameCA(again) {
		t.Errorf("a CA replaced in place: %v, same CA %v", err, err == nil && tc.SameCA(again))
	}

	// Files that do not load leave the ones in force.
	testsupport.RequireNoError(t, os.WriteFile(rotated.Cert, []byte("not a certificate"), 0o600))
	if _, err := LoadTLS(rotated); err == nil {
		t.Error("a broken certificate file was loaded")
	}
	if err := read(cli); err != nil {
		t.Errorf("after a failed reload: %v", err)
	}
}

// TestLoadTLSRefusesHalfWrittenFiles: a certificate chain or a CA bundle
// rewritten in place (not renamed) and read by a reload half way through
// the write is refused, not taken as it stands (pem.Decode skips a
// trailing block it cannot finish): neither a leaf without its
// intermediate nor a bundle missing its last CA. (Found by review.)
func TestLoadTLSRefusesHalfWrittenFiles(t *testing.T) {
	one, two, _ := testsupport.TwoCAs(t)
	dir := t.TempDir()
	read := func(p string) []byte { return testsupport.ReadFile(t, p) }
	cert, key, _ := one.Issue(t, "node")
	files := TLSFiles{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "cert.pem"), Key: filepath.Join(dir, "key.pem")}
	caOne, caTwo := read(one.CAFile), read(two.CAFile)
	testsupport.RequireNoError(t, os.WriteFile(files.CA, append(append([]byte{}, caOne...), caTwo...), 0o600))
	// A chain file: the leaf, then an intermediate (ca-two's certificate
	// stands in for one), cut half way.
	chain := append(append([]byte{}, read(cert)...), caTwo[:len(caTwo)/2]...)
	testsupport.RequireNoError(t, os.WriteFile(files.Cert, chain, 0o600))
	testsupport.RequireNoError(t, os.WriteFile(files.Key, read(key), 0o600))
	tc, err := LoadTLS(files)
	if err == nil {
		t.Errorf("a chain file cut in its second certificate loaded: %d certificate(s) in the chain", len(tc.cur.Load().cert.Certificate))
	} else {
		t.Logf("refused: %v", err)
	}
	// A CA bundle cut in its second CA.
	testsupport.RequireNoError(t, os.WriteFile(files.Cert, read(cert), 0o600))
	full, err := LoadTLS(files)
	testsupport.RequireNoError(t, err)
	testsupport.RequireNoError(t, os.WriteFile(files.CA, append(append([]byte{}, caOne...), caTwo[:len(caTwo)/2]...), 0o600))
	cut, err := LoadTLS(files)
	if err == nil {
		t.Errorf("a CA bundle cut in its second CA loaded (same CA as before: %v): the daemon would make a new etcd client trusting %d of 2 CAs",
			full.SameCA(cut), len(cut.cas))
	}
}

// TestSameCAOnSameCertificates: a CA file written again with the very
// same certificates (a tool that renders the bundle at every renewal: a
// comment line, another order) is the same CA to SameCA, so the next
// reload keeps its etcd client and its election. (Found by review: the
// file's bytes were compared.)
func TestSameCAOnSameCertificates(t *testing.T) {
	one, two, _ := testsupport.TwoCAs(t)
	dir := t.TempDir()
	read := func(p string) []byte { return testsupport.ReadFile(t, p) }
	cert, key, _ := one.Issue(t, "node")
	files := TLSFiles{CA: filepath.Join(dir, "ca.pem"), Cert: cert, Key: key}
	caOne, caTwo := read(one.CAFile), read(two.CAFile)
	testsupport.RequireNoError(t, os.WriteFile(files.CA, append(append([]byte{}, caOne...), caTwo...), 0o600))
	running, err := LoadTLS(files)
	testsupport.RequireNoError(t, err)
	for name, b := range map[string][]byte{
		"comment line":  append(append([]byte("# rendered by the renewal job\n"), caOne...), caTwo...),
		"another order": append(append([]byte{}, caTwo...), caOne...),
		"trailing text": append(append(append([]byte{}, caOne...), caTwo...), "# end of bundle\n"...),
	} {
		testsupport.RequireNoError(t, os.WriteFile(files.CA, b, 0o600))
		again, err := LoadTLS(files)
		testsupport.RequireNoError(t, err)
		if !running.SameCA(again) {
			t.Errorf("%s: the same CA certificates are another CA to SameCA: a reload makes a new etcd client", name)
		}
	}
}
