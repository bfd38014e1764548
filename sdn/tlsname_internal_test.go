package sdn

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"testing"
)

// certNames matches a switch's name exactly: as the common name, as
// ovs-pki's "NAME id:UUID" (with something after "id:"), or as a DNS
// name; nothing else, and no case folding.
func TestCertNames(t *testing.T) {
	cert := func(cn string, dns ...string) *x509.Certificate {
		return &x509.Certificate{Subject: pkix.Name{CommonName: cn}, DNSNames: dns}
	}
	for _, c := range []struct {
		cert *x509.Certificate
		name string
		want bool
	}{
		{cert("sw-a"), "sw-a", true},
		{cert("sw-a id:5f0c9a8e-2d4b-4c1e-9a57-3e8f6b1d2c40"), "sw-a", true},
		{cert("other", "sw-a"), "sw-a", true},
		{cert("sw-a", "other"), "sw-a", true},
		{cert("sw-a id:"), "sw-a", false},
		{cert("sw-a2"), "sw-a", false},
		{cert("sw-a2 id:1"), "sw-a", false},
		{cert("x sw-a id:1"), "sw-a", false},
		{cert("SW-A"), "sw-a", false},
		{cert("sw-a", "sw-b"), "sw-c", false},
		{cert("", ""), "", false},
		{nil, "sw-a", false},
	} {
		name := "<nil>"
		if c.cert != nil {
			name = c.cert.Subject.CommonName
		}
		if got := certNames(c.cert, c.name); got != c.want {
			t.Errorf("certificate %q %v names %q: %v, want %v", name, func() []string {
				if c.cert == nil {
					return nil
				}
				return c.cert.DNSNames
			}(), c.name, got, c.want)
		}
	}
}
