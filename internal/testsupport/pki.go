package testsupport

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// PKI is a CA for tests and the certificates it issued, written as PEM
// files into Dir: the switch CA and the controller's certificate of
// OpenFlow over TLS, as ovs-pki would make them.
type PKI struct {
	CA     *x509.Certificate
	CAFile string // NAME-cacert.pem
	Dir    string
	key    *ecdsa.PrivateKey
}

// NewPKI makes a CA named name in dir.
func NewPKI(t testing.TB, dir, name string) *PKI {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	p := &PKI{CA: ca, key: key, Dir: dir, CAFile: filepath.Join(dir, name+"-cacert.pem")}
	writePEM(t, p.CAFile, "CERTIFICATE", der)
	return p
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

var serial atomic.Int64

// Issue signs a certificate for name (its common name), good for both ends
// of a TLS connection and for 127.0.0.1, and writes NAME-cert.pem and
// NAME-privkey.pem (replacing those of an earlier Issue of the name).
func (p *PKI) Issue(t testing.TB, name string) (certFile, keyFile string, pair tls.Certificate) {
	t.Helper()
	return p.IssueUntil(t, name, time.Now().Add(24*time.Hour))
}

// IssueUntil is Issue for a certificate that expires at notAfter.
func (p *PKI) IssueUntil(t testing.TB, name string, notAfter time.Time) (certFile, keyFile string, pair tls.Certificate) {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(100 + serial.Add(1)),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.CA, &key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	pk, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(p.Dir, name+"-cert.pem"), filepath.Join(p.Dir, name+"-privkey.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "PRIVATE KEY", pk)
	pair, err = tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile, pair
}

// Pool is a pool holding the CA.
func (p *PKI) Pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(p.CA)
	return pool
}

// ClientTLS is a switch's TLS configuration presenting pair to a server on
// 127.0.0.1 whose certificate p issued.
func (p *PKI) ClientTLS(pair tls.Certificate) *tls.Config {
	return &tls.Config{RootCAs: p.Pool(), ServerName: "127.0.0.1",
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &pair, nil }}
}

// TwoCAs makes the CAs "ca-one" and "ca-two" and a PEM bundle of both,
// as for a rotation from one to the other.
func TwoCAs(t testing.TB) (one, two *PKI, bundle string) {
	t.Helper()
	one, two = NewPKI(t, t.TempDir(), "ca-one"), NewPKI(t, t.TempDir(), "ca-two")
	bundle = filepath.Join(t.TempDir(), "ca-one-and-two.pem")
	if err := os.WriteFile(bundle, append(ReadFile(t, one.CAFile), ReadFile(t, two.CAFile)...), 0o600); err != nil {
		t.Fatal(err)
	}
	return one, two, bundle
}

// ReadFile is os.ReadFile that fails the test on an error.
func ReadFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
