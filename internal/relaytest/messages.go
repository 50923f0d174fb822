package relaytest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/outbox"
)

// MessagesOutbox is one test's table-less outbox (postgres.source:
// messages): a publication, a slot and a prefix of its own, and a state
// table standing for the application's state. Each message is written
// with its state row in one transaction, so the state table tells what
// committed, as the outbox table does for a table outbox.
type MessagesOutbox struct {
	URL         string
	Publication string
	Slot        string
	Prefix      string
	State       string // schema-qualified: (seq bigserial, id uuid, type, key, payload jsonb)
	Key         []byte // when set, Emit signs with it (outbox.SigningKey)
}

// NewMessagesOutbox creates the state table under a name of the test's
// own; the publication, slot and prefix are named after it, and all are
// dropped when the test ends. It creates no publication or slot (cdc init
// does).
func NewMessagesOutbox(t testing.TB, url string) MessagesOutbox {
	t.Helper()
	name := pgtest.Name(t, "mo")
	mo := MessagesOutbox{URL: url, Publication: name, Slot: name, Prefix: "app." + name, State: "public." + name + "_state"}
	pgtest.Exec(t, url, "CREATE TABLE "+mo.State+" (seq bigserial PRIMARY KEY, id uuid NOT NULL, type text NOT NULL, key text, payload jsonb NOT NULL)")
	dropAtEnd(t, url, mo.Slot, mo.Publication, mo.State)
	return mo
}

// Config writes a config file for mo with the given sinks YAML (a list,
// indented by two spaces), extra postgres: settings (indented by two
// spaces) and extra top-level YAML, and returns its path.
func (mo MessagesOutbox) Config(t testing.TB, sinks, postgres, extra string) string {
	t.Helper()
	y := fmt.Sprintf(`postgres:
  url: %s
  source: messages
  message_prefix: %s
  publication: %s
  slot: %s
  status_interval: 1s
%s
sinks:
%s
log: {level: debug, format: json}
%s
`, mo.URL, mo.Prefix, mo.Publication, mo.Slot, postgres, sinks, extra)
	p := filepath.Join(t.TempDir(), "cdc.yaml")
	if err := os.WriteFile(p, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Emit writes msgs in tx with outbox.Emit (a Payload that is not valid
// JSON goes as bytes, BinaryPayload), each with its state row.
func (mo MessagesOutbox) Emit(ctx context.Context, tx pgx.Tx, msgs ...Msg) error {
	for _, m := range msgs {
		state := m.Payload
		opts := []outbox.EmitOption{outbox.Prefix(mo.Prefix)}
		if mo.Key != nil {
			opts = append(opts, outbox.SigningKey(mo.Key))
		}
		var payload any = json.RawMessage(m.Payload)
		if !json.Valid([]byte(m.Payload)) {
			opts = append(opts, outbox.BinaryPayload())
			payload = []byte(m.Payload)
			state = "null"
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+mo.State+" (id, type, key, payload) VALUES ($1, $2, NULLIF($3, ''), $4)", m.ID, m.Type, m.Key, state); err != nil {
			return err
		}
		err := outbox.Emit(ctx, tx, outbox.Message{ID: m.ID, Type: m.Type, Key: m.Key, Payload: payload, Headers: m.Headers}, opts...)
		if err != nil {
			return err
		}
	}
	return nil
}

// EmitTx commits msgs in one transaction.
func (mo MessagesOutbox) EmitTx(t testing.TB, conn *pgx.Conn, msgs ...Msg) {
	t.Helper()
	ctx := context.Background()
	if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error { return mo.Emit(ctx, tx, msgs...) }); err != nil {
		t.Fatalf("emitting: %v", err)
	}
}

// EmitSeqTx commits, in one transaction, n messages of type "torture" over
// keys k0..k(keys-1), each payload a Seq whose number is the state row's
// (increasing in commit order), written by SQL alone as a producer in
// another language would: one statement fills the state rows, one emits
// their envelopes in seq order. Only one producer may use it at a time. With rollback the transaction rolls back
// instead.
func (mo MessagesOutbox) EmitSeqTx(t testing.TB, conn *pgx.Conn, n, keys int, rollback bool) {
	t.Helper()
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var from int64
	if err := tx.QueryRow(ctx, "SELECT coalesce(max(seq), 0) FROM "+mo.State).Scan(&from); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO "+mo.State+` (seq, id, type, key, payload)
		SELECT $3 + i, gen_random_uuid(), 'torture', 'k' || (i % $2), jsonb_build_object('key', 'k' || (i % $2), 'seq', $3 + i)
		FROM generate_series(1, $1) i`, n, keys, from); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT setval(pg_get_serial_sequence($1, 'seq'), $2)", mo.State, from+int64(n)); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT pg_logical_emit_message(true, $1, json_build_object('id', id, 'type', type, 'key', key, 'payload', payload)::text)
		FROM (SELECT * FROM `+mo.State+` WHERE seq > $2 ORDER BY seq) s`, mo.Prefix, from); err != nil {
		t.Fatal(err)
	}
	if rollback {
		return
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// Committed reads the "torture" messages that committed (the state table
// is the truth), for CheckDelivered.
func (mo MessagesOutbox) Committed(t testing.TB, conn *pgx.Conn) map[string]Seq {
	t.Helper()
	return committedIn(t, conn, mo.State)
}
