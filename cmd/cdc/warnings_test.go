package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/pgtest"
)

// TestRunWarnsAboutInsecureSettings: at start `cdc run` warns when the
// Postgres connection does not verify a remote server (any sslmode but
// verify-full) and when pprof is served on a non-loopback address
// without http.auth; a loopback server and address draw no warning.
func TestRunWarnsAboutInsecureSettings(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	start := func(name, url, listen, auth string) string {
		p := filepath.Join(dir, name)
		writeFile(t, p, fmt.Sprintf("postgres: {url: '%s'}\nsinks: [{name: out, kind: discard}]\nhttp: {listen: '%s', pprof: true%s}\n", url, listen, auth))
		c := startCDC(t, "run", "--config", p)
		if !pgtest.WaitFor(20*time.Second, func() bool { return strings.Contains(c.Stderr.String(), `"message":"connecting"`) }) {
			t.Fatalf("%s: cdc run did not start:\n%s", name, c.Stderr.String())
		}
		c.Kill9(t)
		return c.Stderr.String()
	}
	port1, _ := pgtest.FreePort()
	logs := start("insecure.yaml", "postgres://u@192.0.2.1:5432/app?sslmode=require&connect_timeout=1", fmt.Sprintf("0.0.0.0:%d", port1), "")
	for _, want := range []string{"sslmode=verify-full", "http.pprof is on and http.listen is not a loopback address"} {
		if !strings.Contains(logs, want) {
			t.Errorf("no warning with %q:\n%s", want, logs)
		}
	}
	port2, _ := pgtest.FreePort()
	logs = start("local.yaml", "postgres://u@127.0.0.1:1/app?sslmode=disable&connect_timeout=1", fmt.Sprintf("127.0.0.1:%d", port2), "")
	if strings.Contains(logs, "sslmode=verify-full") || strings.Contains(logs, "http.pprof is on") {
		t.Errorf("warnings for a loopback server and listener:\n%s", logs)
	}
	// With http.auth, pprof on a non-loopback address asks for credentials.
	port3, _ := pgtest.FreePort()
	logs = start("auth.yaml", "postgres://u@127.0.0.1:1/app?sslmode=disable&connect_timeout=1", fmt.Sprintf("0.0.0.0:%d", port3), ", auth: {bearer_token: 'tok-1234567'}")
	if !strings.Contains(logs, `"auth":true`) || strings.Contains(logs, "http.pprof is on") {
		t.Errorf("pprof behind http.auth: a warning, or no auth:\n%s", logs)
	}
}

// TestRunWarnsThatReceiveBufferIsDeprecated: a config that sets
// postgres.receive_buffer still starts, and cdc run's log warns that the
// key is deprecated and what to do; without the key, no such warning.
func TestRunWarnsThatReceiveBufferIsDeprecated(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	start := func(name, extra string) string {
		p := filepath.Join(dir, name)
		writeFile(t, p, "postgres: {url: 'postgres://u@127.0.0.1:1/app?sslmode=disable&connect_timeout=1'"+extra+"}\nsinks: [{name: out, kind: discard}]\n")
		c := startCDC(t, "run", "--config", p)
		if !pgtest.WaitFor(20*time.Second, func() bool { return strings.Contains(c.Stderr.String(), `"message":"connecting"`) }) {
			t.Fatalf("%s: cdc run did not start:\n%s", name, c.Stderr.String())
		}
		c.Kill9(t)
		return c.Stderr.String()
	}
	logs := start("kernel.yaml", ", receive_buffer: kernel")
	if !strings.Contains(logs, `"message":"postgres.receive_buffer is deprecated`) || !strings.Contains(logs, "remove the key") {
		t.Errorf("no deprecation warning for receive_buffer: kernel:\n%s", logs)
	}
	if logs := start("none.yaml", ""); strings.Contains(logs, "receive_buffer is deprecated") {
		t.Errorf("a deprecation warning without the key:\n%s", logs)
	}
}
