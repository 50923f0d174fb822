package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/relaytest"
)

// TestIntegrationResendToAFileTheRelayHoldsFailsAtOnce: with a file sink
// and relay.on_invalid: hold_key, a row of key k that cannot be mapped
// holds k. While the relay runs (and holds the file's lock), cdc
// dead-letter resend of the fixed row exits 1 at once, saying to stop the
// relay and run it again, and changes nothing: the key stays held. Once the
// relay is stopped the same command delivers the row and the key's held
// message in order and releases the key.
func TestIntegrationResendToAFileTheRelayHoldsFailsAtOnce(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	cfg := ob.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s}", out), "relay: {on_invalid: hold_key}")
	dlq := relaytest.WithDeadLetterTable(t, url, cfg)
	cdcInit(t, cfg)
	conn := pgtest.Connect(t, url)

	msgs := holdRows(4, 2, 0) // k0, k1, k0, k1
	bad := map[string]bool{msgs[0].ID: true}
	msgs[0].Type = "fixed"
	insertHeldTest(t, ob, conn, msgs, bad)
	relay := startCDC(t, "run", "--config", cfg)
	relaytest.WaitAllDelivered(t, out, []relaytest.Msg{msgs[1], msgs[3]}, 60*time.Second, relay.Stderr.String)
	pgtest.Await(t, 30*time.Second, "k0 held with 2 parked", func() bool {
		held := statusHeld(t, cfg)
		return len(held) == 1 && held[0].Key == "k0" && held[0].Messages == 2
	})
	pgtest.Exec(t, url, fmt.Sprintf(`UPDATE %s SET row_data = jsonb_set(row_data, '{type}', '"fixed"') WHERE message_id = '%s'`, dlq, msgs[0].ID))

	code, stdout, stderr := cdc(t, nil, "dead-letter", "--config", cfg, "resend", msgs[0].ID)
	if code != 1 || !strings.Contains(stdout+stderr, "locked by another process") || !strings.Contains(stderr, "stop that cdc run, run this command again") {
		t.Fatalf("resend to the file a running relay holds: exit %d, want 1 at once saying to stop the relay\n%s\n%s", code, stdout, stderr)
	}
	if held := statusHeld(t, cfg); len(held) != 1 || held[0].Key != "k0" || held[0].Messages != 2 {
		t.Fatalf("after the refused resend: held keys %+v, want k0 still held with 2 parked", held)
	}
	relay.Stop(t)

	if code, stdout, stderr := cdc(t, nil, "dead-letter", "--config", cfg, "resend", msgs[0].ID); code != 0 {
		t.Fatalf("resend with the relay stopped: exit %d\n%s\n%s", code, stdout, stderr)
	}
	var k0 []string
	for _, l := range relaytest.ReadLines(t, out) {
		if l.Key != nil && *l.Key == "k0" {
			k0 = append(k0, l.ID)
		}
	}
	if len(k0) != 2 || k0[0] != msgs[0].ID || k0[1] != msgs[2].ID {
		t.Fatalf("k0 in the file: %v, want %s then %s", k0, msgs[0].ID, msgs[2].ID)
	}
	if held := statusHeld(t, cfg); len(held) != 0 {
		t.Fatalf("held keys %+v after the release", held)
	}
}
