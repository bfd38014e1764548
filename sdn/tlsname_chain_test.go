package sdn

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"testing"
	"time"
)

type chainCert struct {
	cert *x509.Certificate
	der  []byte
	key  *ecdsa.PrivateKey
}

func chainIssue(t *testing.T, cn string, parent *chainCert, ca bool, eku []x509.ExtKeyUsage) *chainCert {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: eku}
	if ca {
		tmpl.IsCA, tmpl.BasicConstraintsValid, tmpl.KeyUsage = true, true, x509.KeyUsageCertSign
	} else {
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		tmpl.DNSNames = []string{cn}
	}
	pt, pk := tmpl, key
	if parent != nil {
		pt, pk = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, pt, &key.PublicKey, pk)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return &chainCert{cert: c, der: der, key: key}
}

// handshake returns the server side of a mutual-TLS connection whose
// client presents chain, verified against clientCAs.
func chainHandshake(t *testing.T, clientCAs *x509.CertPool, server *chainCert, chain ...*chainCert) (*tls.Conn, error) {
	t.Helper()
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	sc := tls.Server(a, &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{server.der}, PrivateKey: server.key}},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clientCAs, MinVersion: tls.VersionTLS12})
	var ders [][]byte
	for _, c := range chain {
		ders = append(ders, c.der)
	}
	cc := tls.Client(b, &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{{Certificate: ders, PrivateKey: chain[0].key}}})
	errc := make(chan error, 1)
	go func() { errc <- cc.Handshake(); _, _ = cc.Read(make([]byte, 1)) }()
	_ = a.SetDeadline(time.Now().Add(5 * time.Second))
	err := sc.Handshake()
	return sc, err
}

// TestCertUntrustedAgreesWithHandshake: whatever the TLS handshake
// accepted, certUntrusted (run on every reload) keeps: a leaf issued by an
// intermediate the switch sends, an intermediate-only ca_file, a leaf
// without an extended key usage, a bundle in which the CA is one of many.
func TestCertUntrustedAgreesWithHandshake(t *testing.T) {
	root := chainIssue(t, "root", nil, true, nil)
	inter := chainIssue(t, "inter", root, true, nil)
	other := chainIssue(t, "other", nil, true, nil)
	srv := chainIssue(t, "controller", root, false, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth})
	leafInter := chainIssue(t, "sw-inter", inter, false, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth})
	leafNoEKU := chainIssue(t, "sw-noeku", root, false, nil)
	pool := func(cs ...*chainCert) *x509.CertPool {
		p := x509.NewCertPool()
		for _, c := range cs {
			p.AddCert(c.cert)
		}
		return p
	}
	for _, tc := range []struct {
		name  string
		cas   *x509.CertPool
		chain []*chainCert
	}{
		{"leaf+intermediate, root CA", pool(root), []*chainCert{leafInter, inter}},
		{"leaf only, intermediate as CA", pool(inter), []*chainCert{leafInter}},
		{"no EKU", pool(root), []*chainCert{leafNoEKU}},
		{"bundle", pool(other, root), []*chainCert{leafInter, inter}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc, err := chainHandshake(t, tc.cas, srv, tc.chain...)
			if err != nil {
				t.Fatalf("handshake: %v", err)
			}
			if why := certUntrusted(sc, tc.cas); why != "" {
				t.Errorf("the handshake accepted it, a reload would drop it: %s", why)
			}
			// The same CAs read again in another order.
			if why := certUntrusted(sc, pool(root, other, inter)); why != "" {
				t.Errorf("with a reordered superset: %s", why)
			}
		})
	}
}
