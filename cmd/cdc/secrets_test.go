package main

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// TestSecretsAreNeverPrinted: malformed URLs and connection strings
// holding a secret, and secrets made of YAML's special characters given
// through ${VAR}, make every command exit 2 with an error naming the field,
// and the secret never reaches stdout or stderr.
func TestSecretsAreNeverPrinted(t *testing.T) {
	const pw = "Zq9-s3cr3t"
	const sas = "SASKEY0123456789abcdefXYZ="
	dir := t.TempDir()
	cases := []struct {
		name, yaml, field string
		env               []string
	}{
		{"bad escape", "postgres: {url: 'postgres://u:" + pw + "@h/db%zz'}\nsinks: [{name: a, kind: discard}]\n", "postgres.url", nil},
		{"bad sslmode", "postgres: {url: 'postgres://u:" + pw + "@h/db?sslmode=sometimes'}\nsinks: [{name: a, kind: discard}]\n", "postgres.url", nil},
		{"unclosed bracket", "postgres: {url: 'postgres://u:" + pw + "@[::1/db'}\nsinks: [{name: a, kind: discard}]\n", "postgres.url", nil},
		{"dsn quote", "postgres: {url: \"host=h password='" + pw + " dbname=x\"}\nsinks: [{name: a, kind: discard}]\n", "postgres.url", nil},
		{"at sign in password", "postgres: {url: 'postgres://u:" + pw + "@x@h/db'}\nsinks: [{name: a, kind: discard}]\n", "postgres.url", nil},
		{"servicebus commas", "postgres: {url: 'postgres://u@h/db'}\nsinks: [{name: a, kind: servicebus, queue: q, connection_string: 'Endpoint=sb://x.servicebus.windows.net/,SharedAccessKeyName=k,SharedAccessKey=" + sas + "'}]\n", "connection_string", nil},
		{"yaml alias secret", "postgres: {url: 'postgres://u:${PW}@h/db?sslmode=nope'}\nsinks: [{name: a, kind: discard}]\n", "postgres.url", []string{"PW=*" + pw}},
		{"yaml injection secret", "postgres:\n  url: postgres://u:${PW}@h:notaport/db\nsinks: [{name: a, kind: discard}]\n", "postgres.url", []string{"PW=" + pw + ", slot: x"}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, kv := range c.env {
				k, v, _ := strings.Cut(kv, "=")
				t.Setenv(k, v)
			}
			p := filepath.Join(dir, fmt.Sprintf("c%d.yaml", i))
			writeFile(t, p, c.yaml)
			for _, cmd := range []string{"run", "init", "status"} {
				var out bytes.Buffer
				code := run([]string{cmd, "--config", p}, &out, &out)
				if code != 2 || !strings.Contains(out.String(), c.field) {
					t.Errorf("cdc %s: exit %d, want 2 with an error naming %s: %s", cmd, code, c.field, out.String())
				}
				for _, secret := range []string{pw, sas} {
					if strings.Contains(out.String(), secret) {
						t.Fatalf("cdc %s printed a secret: %s", cmd, out.String())
					}
				}
			}
		})
	}
}
