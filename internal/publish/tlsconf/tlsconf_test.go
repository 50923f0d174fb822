package tlsconf

import (
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/walpost/walpost/internal/publish/sinktest"
	"github.com/walpost/walpost/internal/publish/tlsconf/tlstest"
)

// TestValidateNamesTheField: each rule's error names the tls. field, and
// with TLS off says why in the sink's own words.
func TestValidateNamesTheField(t *testing.T) {
	const off = "url is not https"
	for _, c := range []struct {
		s    Settings
		on   bool
		want string
	}{
		{Settings{}, false, ""},
		{Settings{}, true, ""},
		{Settings{CertFile: "c", KeyFile: "k"}, true, ""},
		{Settings{CAFile: "ca"}, false, "tls.ca_file: set, but url is not https"},
		{Settings{CertFile: "c"}, false, "tls.cert_file: set, but url is not https"},
		{Settings{KeyFile: "k"}, false, "tls.key_file: set, but url is not https"},
		{Settings{InsecureSkipVerify: true}, false, "tls.insecure_skip_verify: set, but url is not https"},
		{Settings{ServerName: "h"}, false, "tls.server_name: set, but url is not https"},
		{Settings{CertFile: "c"}, true, "tls.key_file: empty, but tls.cert_file is set (a client certificate needs both)"},
		{Settings{KeyFile: "k"}, true, "tls.cert_file: empty, but tls.key_file is set (a client certificate needs both)"},
	} {
		err := c.s.Validate(c.on, off)
		if got := fmt.Sprint(err); c.want == "" && err != nil || c.want != "" && got != c.want {
			t.Errorf("%+v on=%v: %v, want %q", c.s, c.on, err, c.want)
		}
	}
	sw := Switch{Settings: Settings{CAFile: "ca"}}
	if err := sw.Validate(); fmt.Sprint(err) != "tls.ca_file: set, but tls.enabled is false (set enabled: true to use TLS)" {
		t.Errorf("Switch off with ca_file: %v", err)
	}
	sw.Enabled = true
	if err := sw.Validate(); err != nil {
		t.Errorf("Switch on with ca_file: %v", err)
	}
}

// TestKeysAsUsersWriteThem: Settings takes the five keys and refuses
// enabled (rabbitmq and webhook take TLS from the URL); Switch adds it.
func TestKeysAsUsersWriteThem(t *testing.T) {
	const keys = "ca_file: a, cert_file: c, key_file: k, insecure_skip_verify: true, server_name: h"
	var plain struct {
		TLS Settings `yaml:"tls"`
	}
	if err := sinktest.SinkConfig(t, "name: s\nkind: k\ntls: {"+keys+"}\n").Decode(&plain); err != nil {
		t.Fatal(err)
	}
	if want := (Settings{"a", "c", "k", true, "h"}); plain.TLS != want {
		t.Errorf("decoded %+v, want %+v", plain.TLS, want)
	}
	if err := sinktest.SinkConfig(t, "name: s\nkind: k\ntls: {enabled: true}\n").Decode(&plain); err == nil ||
		!strings.Contains(err.Error(), `unknown key "enabled"`) {
		t.Errorf("Settings with enabled: %v, want an unknown key", err)
	}
	var sw struct {
		TLS Switch `yaml:"tls"`
	}
	if err := sinktest.SinkConfig(t, "name: s\nkind: k\ntls: {enabled: true, "+keys+"}\n").Decode(&sw); err != nil {
		t.Fatal(err)
	}
	if want := (Switch{true, Settings{"a", "c", "k", true, "h"}}); sw.TLS != want {
		t.Errorf("decoded %+v, want %+v", sw.TLS, want)
	}
}

// TestBuildLoadsTheFilesAndNamesTheField: a CA file and a client
// certificate are loaded; a missing or empty file is an error naming its
// field; a Switch that is off builds nothing.
func TestBuildLoadsTheFilesAndNamesTheField(t *testing.T) {
	dir := t.TempDir()
	pki := tlstest.NewPKI(t)
	ca, cert, key := pki.CAFile, pki.ClientCert, pki.ClientKey
	tc, err := (&Settings{CAFile: ca, CertFile: cert, KeyFile: key, ServerName: "h", InsecureSkipVerify: true}).Build()
	if err != nil {
		t.Fatal(err)
	}
	if tc.RootCAs == nil || len(tc.Certificates) != 1 || tc.ServerName != "h" || !tc.InsecureSkipVerify || tc.MinVersion != tls.VersionTLS12 {
		t.Errorf("built %+v", tc)
	}
	empty := filepath.Join(dir, "empty.pem")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		s    Settings
		want string
	}{
		{Settings{CAFile: filepath.Join(dir, "missing.pem")}, "tls.ca_file: open " + filepath.Join(dir, "missing.pem")},
		{Settings{CAFile: empty}, "tls.ca_file: no PEM certificate in " + empty},
		{Settings{CertFile: cert, KeyFile: empty}, "tls.cert_file, tls.key_file: "},
	} {
		if _, err := c.s.Build(); err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q...", c.s, err, c.want)
		}
	}
	if _, err := (&Settings{CAFile: filepath.Join(dir, "missing.pem")}).Build(); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing file: %v, want it to wrap os.ErrNotExist", err)
	}
	if tc, err := (&Switch{Settings: Settings{CAFile: empty}}).Build(); tc != nil || err != nil {
		t.Errorf("Switch off: %v, %v; want nothing built", tc, err)
	}
}
