package sdn

import (
	"os"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/appliance/cluster"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// The attack: the controller's TLS key (or the etcd client's) left
// readable by every user. Any local user reads it (done here, as user
// 65534) and can then pose as the controller to the switches, or as the
// node to etcd. Before, both loaders took such a key. Now they refuse it
// and say chmod o-r; a key readable by its group (Debian's 0640
// root:ssl-cert) is taken.
func TestPrivateKeyReadableByEveryUserRefused(t *testing.T) {
	testsupport.RequireRoot(t, "setpriv")
	dir := testsupport.SharedTempDir(t)
	pki := testsupport.NewPKI(t, dir, "ca")
	cert, key, _ := pki.Issue(t, "ctl")
	testsupport.RequireNoError(t, os.Chmod(key, 0o644))
	out, err := testsupport.AsOtherUser(t, "cat", key).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "PRIVATE KEY") {
		t.Fatalf("user 65534 could not read the 0644 key (%v): the test mounts nothing", err)
	}
	want := "is readable by every user (mode 0644)"
	if _, err := LoadTLS(cert, key, pki.CAFile); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "chmod o-r "+key) {
		t.Errorf("the controller took a key every user can read: %v", err)
	}
	if _, err := cluster.LoadTLS(cluster.TLSFiles{CA: pki.CAFile, Cert: cert, Key: key}); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("the etcd client took a key every user can read: %v", err)
	}
	testsupport.RequireNoError(t, os.Chmod(key, 0o640))
	if _, err := LoadTLS(cert, key, pki.CAFile); err != nil {
		t.Errorf("a 0640 key refused: %v", err)
	}
	if _, err := cluster.LoadTLS(cluster.TLSFiles{CA: pki.CAFile, Cert: cert, Key: key}); err != nil {
		t.Errorf("a 0640 key refused by the etcd client: %v", err)
	}
}
