package sdn

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"github.com/sosappliance/sosappliance/internal/filetrust"
)

// LoadTLS reads the controller's certificate and key and the CA that signs
// the switches' certificates, and returns the server configuration of the
// OpenFlow listener: TLS 1.2 or later, and a client certificate from that
// CA required of every switch.
func LoadTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	if err := filetrust.CheckSecret("controller key_file", keyFile); err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("controller certificate: %w", err)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("switch CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("switch CA %s: no PEM certificate in it", caFile)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		MinVersion:   tls.VersionTLS12,
	}, nil
}
