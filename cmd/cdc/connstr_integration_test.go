package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/relaytest"
)

// TestIntegrationADONETURLConnectsWhereItSays: postgres.url written as an
// ADO.NET (Npgsql) connection string pointing at the test server makes
// cdc run relay from it (the string is converted, not sent to a default
// server as a startup parameter); a URL whose password holds an unescaped
// '/' exits 2 saying to write %2F, without a piece of the password. The
// string carries Npgsql's Keepalive, Tcp Keepalive and Trust Server
// Certificate, which become the connection's TCP keepalive (not run-time
// parameters the server refuses) or mean what SSL Mode says already; with
// SSL Mode=VerifyFull, Trust Server Certificate=true is refused naming the
// key to drop, and a keepalives_idle that is no number is refused naming
// it.
func TestIntegrationADONETURLConnectsWhereItSays(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	pc, err := pgconn.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	ob := relaytest.NewOutbox(t, url)
	ado := fmt.Sprintf("Host=%s;Port=%d;Database=%s;User ID=%s;Password='%s';SSL Mode=Disable;Pooling=true;Keepalive=30;Tcp Keepalive=true;Trust Server Certificate=true",
		pc.Host, pc.Port, pc.Database, pc.User, strings.ReplaceAll(pc.Password, "'", "''"))
	out := filepath.Join(t.TempDir(), "out.jsonl")
	cfg := ob.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s}", out), "")
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte(strings.Replace(string(b), "url: "+url, fmt.Sprintf("url: %q", ado), 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	cdcInit(t, cfg)
	conn := pgtest.Connect(t, url)
	m := relaytest.NewMsg("t", "k", 1)
	ob.InsertTx(t, conn, m)
	relay := startCDC(t, "run", "--config", cfg)
	defer relay.Kill9(t)
	relaytest.WaitAllDelivered(t, out, []relaytest.Msg{m}, 60*time.Second, relay.Stderr.String)

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("postgres:\n  url: postgres://walpost:1234/secretpart@db.example.com/app\nsinks: [{name: o, kind: stdout}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := cdc(t, nil, "status", "--config", bad)
	if code != 2 || !strings.Contains(stderr, "%2F") || strings.Contains(stderr, "secretpart") || strings.Contains(stderr, "1234") {
		t.Errorf("a '/' in the password: exit %d, stderr %q; want 2 saying %%2F, without the password", code, stderr)
	}
	for _, c := range []struct{ url, want string }{
		{"Host=db.example.com;Username=u;Password=pw-77a1;SSL Mode=VerifyFull;Trust Server Certificate=true", "drop Trust Server Certificate to keep verifying"},
		{"postgres://u:pw-77a1@db.example.com/app?keepalives_idle=thirty", "keepalives_idle must be a whole number (seconds)"},
	} {
		if err := os.WriteFile(bad, []byte(fmt.Sprintf("postgres:\n  url: %q\nsinks: [{name: o, kind: stdout}]\n", c.url)), 0o600); err != nil {
			t.Fatal(err)
		}
		code, _, stderr := cdc(t, nil, "run", "--config", bad)
		if code != 2 || !strings.Contains(stderr, c.want) || strings.Contains(stderr, "pw-77a1") {
			t.Errorf("%s: exit %d, stderr %q; want 2 saying %q, without the password", c.url, code, stderr, c.want)
		}
	}
}
