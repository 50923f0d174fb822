package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// Settings are the keys of a sink's tls: mapping that configure a TLS
// connection. The zero value verifies the server against the system's
// roots, without a client certificate. Validate and Build only read it.
type Settings struct {
	// CAFile holds the PEM certificates the server's chain must lead to
	// (default: the system's).
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are a client certificate (mutual TLS): both
	// or neither.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// InsecureSkipVerify turns off the check of the server's certificate.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
	// ServerName overrides the name checked against the server's
	// certificate (default: the host the sink connects to).
	ServerName string `yaml:"server_name"`
}

// Validate checks the settings of a connection that uses TLS when on is
// true. When on is false none of them may be set, and the error says why
// TLS is off: "tls.ca_file: set, but " + off. Errors name the field.
func (s *Settings) Validate(on bool, off string) error {
	if !on {
		for _, f := range []struct {
			name string
			set  bool
		}{{"ca_file", s.CAFile != ""}, {"cert_file", s.CertFile != ""}, {"key_file", s.KeyFile != ""},
			{"insecure_skip_verify", s.InsecureSkipVerify}, {"server_name", s.ServerName != ""}} {
			if f.set {
				return fmt.Errorf("tls.%s: set, but %s", f.name, off)
			}
		}
		return nil
	}
	if (s.CertFile == "") != (s.KeyFile == "") {
		if s.CertFile == "" {
			return errors.New("tls.cert_file: empty, but tls.key_file is set (a client certificate needs both)")
		}
		return errors.New("tls.key_file: empty, but tls.cert_file is set (a client certificate needs both)")
	}
	return nil
}

// Build loads the files and returns the *tls.Config (TLS 1.2 or later).
// Errors name the field and never hold a file's contents.
func (s *Settings) Build() (*tls.Config, error) {
	tc := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: s.InsecureSkipVerify, //nolint:gosec // the user asked for it in the config
		ServerName:         s.ServerName,
	}
	if s.CAFile != "" {
		pem, err := os.ReadFile(s.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls.ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls.ca_file: no PEM certificate in %s", s.CAFile)
		}
		tc.RootCAs = pool
	}
	if s.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(s.CertFile, s.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls.cert_file, tls.key_file: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// Switch are the tls: settings of a sink that turns TLS on with its own
// key, enabled (off by default).
type Switch struct {
	// Enabled turns TLS on; the other keys may be set only with it.
	Enabled  bool `yaml:"enabled"`
	Settings `yaml:",inline"`
}

// offSwitch says why TLS is off for a Switch.
const offSwitch = "tls.enabled is false (set enabled: true to use TLS)"

// Validate checks the settings (see Settings.Validate); with enabled
// false none of the others may be set.
func (s *Switch) Validate() error {
	return s.Settings.Validate(s.Enabled, offSwitch)
}

// Build returns the *tls.Config, or nil when TLS is off (see
// Settings.Build).
func (s *Switch) Build() (*tls.Config, error) {
	if !s.Enabled {
		return nil, nil
	}
	return s.Settings.Build()
}
