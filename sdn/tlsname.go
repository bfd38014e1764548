package sdn

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/sosappliance/sosappliance/sdn/flows"
)

// certNames reports whether a switch's certificate names name: its
// subject common name is name, or name followed by " id:" and anything
// (what ovs-pki writes unless told -u), or one of its DNS names is name.
func certNames(cert *x509.Certificate, name string) bool {
	if cert == nil || name == "" {
		return false
	}
	cn := cert.Subject.CommonName
	if cn == name {
		return true
	}
	if rest, ok := strings.CutPrefix(cn, name+" id:"); ok && rest != "" {
		return true
	}
	return slices.Contains(cert.DNSNames, name)
}

// peerCert is the certificate the peer of a TLS connection presented, nil
// over plain TCP.
func peerCert(conn net.Conn) *x509.Certificate {
	tc, ok := conn.(*tls.Conn)
	if !ok {
		return nil
	}
	certs := tc.ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return nil
	}
	return certs[0]
}

// certMismatch says why conn's certificate cannot be switch sw's ("" when
// it can): with sw.TLSName set, the certificate must name it, so that a
// certificate the switch CA issued to another switch (or host) cannot
// claim sw's datapath id.
func certMismatch(sw flows.Switch, conn net.Conn) string {
	if sw.TLSName == "" {
		return ""
	}
	cert := peerCert(conn)
	switch {
	case cert == nil:
		return fmt.Sprintf("switch %s must present a certificate naming %q", sw.Name, sw.TLSName)
	case !certNames(cert, sw.TLSName):
		return fmt.Sprintf("switch %s: the certificate of %q does not name %q", sw.Name, cert.Subject.CommonName, sw.TLSName)
	}
	return ""
}

// certUntrusted says why conn's certificate chain does not verify against
// the switch CAs cas ("" when it does, or conn is not TLS): a connected
// switch whose certificate a CA replaced in place (SetTLS), or time, no
// longer vouches for is not kept.
func certUntrusted(conn net.Conn, cas *x509.CertPool) string {
	tc, ok := conn.(*tls.Conn)
	if !ok {
		return ""
	}
	certs := tc.ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return "no certificate"
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: cas, Intermediates: inter,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return fmt.Sprintf("the certificate of %q does not verify against the switch CA in force: %v", certs[0].Subject.CommonName, err)
	}
	return ""
}
