package natstest

import (
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
)

// StartEmbedded starts a nats-server of the version in go.mod inside the
// test binary, JetStream on (its store in t.TempDir()), on a free port of
// 127.0.0.1, and returns its URL; it stops when the test ends. It is for
// what the machine's server is too old for: per-message TTL (2.11+) and
// message schedules (2.12+).
func StartEmbedded(t testing.TB) string {
	t.Helper()
	ns, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, JetStream: true,
		StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatalf("embedded nats-server: %v", err)
	}
	go ns.Start()
	t.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(30 * time.Second) {
		t.Fatal("embedded nats-server: not ready within 30s")
	}
	return ns.ClientURL()
}

// EmbeddedVersion is the version of the server StartEmbedded starts.
const EmbeddedVersion = natsserver.VERSION
