// Package tlsfiles builds a client *tls.Config from PEM files named in the
// properties file, with errors that name the property at fault.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// Files names the PEM files of one TLS client and the property keys that
// named them (for errors).
type Files struct {
	CA, Cert, Key             string // paths; CA empty = the system roots; Cert and Key both or neither
	CAKey, CertKey, KeyKey    string // property keys, e.g. "zookeeper.tls.ca.file"
	ServerName, ServerNameKey string // verify the servers' certificates against this name; empty = each server's host
}

// Config loads the files. A missing or unreadable file, a PEM without a
// certificate, or a key that does not match the certificate is an error
// naming the key; nothing secret is put in the error.
func (f Files) Config() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.ServerName}
	if f.CA != "" {
		pem, err := os.ReadFile(f.CA)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.CAKey, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s: %s holds no PEM certificate", f.CAKey, f.CA)
		}
		cfg.RootCAs = pool
	}
	switch {
	case f.Cert != "" && f.Key != "":
		pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("%s / %s: %w", f.CertKey, f.KeyKey, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	case f.Cert != "":
		return nil, fmt.Errorf("%s is set but %s is not: a client certificate needs both", f.CertKey, f.KeyKey)
	case f.Key != "":
		return nil, fmt.Errorf("%s is set but %s is not: a client certificate needs both", f.KeyKey, f.CertKey)
	}
	return cfg, nil
}
