package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/relaytest"
)

// enableSSL gives cluster c a self-signed certificate for 127.0.0.1 and
// turns ssl on (a reload, no restart).
func enableSSL(t *testing.T, c *pgtest.Cluster) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:   time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(c.Dir, "data")
	fi, err := os.Stat(data)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	for name, b := range map[string][]byte{
		"server.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		"server.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}),
	} {
		p := filepath.Join(data, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, int(st.Uid), int(st.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	conn := pgtest.Connect(t, c.URL("postgres"))
	for _, q := range []string{"ALTER SYSTEM SET ssl = on", "SELECT pg_reload_conf()"} {
		if _, err := conn.Exec(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if !pgtest.WaitFor(10*time.Second, func() bool {
		var on string
		return conn.QueryRow(context.Background(), "SHOW ssl").Scan(&on) == nil && on == "on"
	}) {
		t.Fatalf("ssl is not on after the reload; server log:\n%s", tailFile(c.LogFile(), 2000))
	}
}

func tailFile(path string, n int) string {
	b, _ := os.ReadFile(path)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// TestIntegrationStreamsOverTLS: with sslmode=require the replication
// connection is TLS over the raw-system-call socket (rawnet under
// crypto/tls): a backlog with a 1 MiB message arrives whole and in order
// (receive_buffer: 65536 finds the socket under TLS), then
// messages committed while the relay keeps up (reads that poll with
// pastDeadline through TLS) arrive too, and the server says the WAL
// sender's connection is encrypted.
func TestIntegrationStreamsOverTLS(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	enableSSL(t, c)
	url := c.URL("postgres")
	ob := relaytest.NewOutbox(t, url)
	ob.URL = strings.Replace(url, "sslmode=disable", "sslmode=require", 1)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	cfg := ob.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s}", out), "")
	y, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, cfg, strings.Replace(string(y), "postgres:\n", "postgres:\n  receive_buffer: 65536\n", 1))
	cdcInit(t, cfg)
	conn := pgtest.Connect(t, url)

	var all []relaytest.Msg
	for tx := range 5 {
		msgs := make([]relaytest.Msg, 300)
		for i := range msgs {
			msgs[i] = relaytest.NewMsg("tls", fmt.Sprintf("k%d", i%5), tx*1000+i)
		}
		msgs[100].Payload = fmt.Sprintf(`{"big": %q}`, strings.Repeat("t", 1<<20))
		ob.InsertTx(t, conn, msgs...)
		all = append(all, msgs...)
	}
	p := startCDC(t, "run", "--config", cfg)
	line := streamingLine(t, p)
	if line["receive_buffer"] != float64(65536) {
		t.Errorf("streaming line %v: want receive_buffer 65536 (the socket under TLS found and sized)", line)
	}
	relaytest.WaitAllDelivered(t, out, all, 60*time.Second, p.Stderr.String)
	var ssl bool
	if err := conn.QueryRow(context.Background(),
		"SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_replication r USING (pid)").Scan(&ssl); err != nil || !ssl {
		t.Fatalf("the WAL sender's connection: ssl %v, %v; want an encrypted one", ssl, err)
	}
	for i := range 50 {
		m := relaytest.NewMsg("tls", "live", 10000+i)
		ob.InsertTx(t, conn, m)
		all = append(all, m)
		time.Sleep(2 * time.Millisecond)
	}
	lines := relaytest.WaitAllDelivered(t, out, all, 60*time.Second, p.Stderr.String)
	if len(lines) != len(all) {
		t.Fatalf("%d lines for %d messages", len(lines), len(all))
	}
	for i, l := range lines {
		if l.ID != all[i].ID {
			t.Fatalf("line %d: %s, want %s (commit order)", i+1, l.ID, all[i].ID)
		}
	}
	p.Cmd.Process.Signal(os.Interrupt)
	if code := p.Wait(30 * time.Second); code != 0 {
		t.Fatalf("cdc run exited %d:\n%s", code, p.Stderr.String())
	}
}
