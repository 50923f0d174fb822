package outbox_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/internal/decoder"
	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/outbox"
)

// TestIntegrationEmitWritesWhatTheRelayReads: Emit (pgx) and EmitSQL
// (database/sql) in committed transactions reach a slot on an empty
// publication as the messages they were given, in commit order, and the
// relay's decoder reads them; an emitted message of a rolled-back
// transaction is not there. No table is written.
func TestIntegrationEmitWritesWhatTheRelayReads(t *testing.T) {
	url := pgtest.URL(t)
	ctx := context.Background()
	name := pgtest.Name(t, "emit")
	pgtest.Exec(t, url, "CREATE PUBLICATION "+name, "SELECT pg_create_logical_replication_slot('"+name+"', 'pgoutput')")
	t.Cleanup(func() {
		pgtest.Exec(t, url, "SELECT pg_drop_replication_slot('"+name+"')", "DROP PUBLICATION "+name)
	})
	conn := pgtest.Connect(t, url)
	first := outbox.Message{ID: outbox.NewID(), Type: "order.placed", Key: "o-1", Payload: json.RawMessage(`{"total": 42}`)}
	second := outbox.Message{ID: outbox.NewID(), Type: "invoice.pdf", Payload: []byte{0x25, 0x50, 0xff, 0}}
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if err := outbox.Emit(ctx, tx, first, outbox.Prefix(name)); err != nil {
			return err
		}
		return outbox.Emit(ctx, tx, second, outbox.Prefix(name), outbox.BinaryPayload())
	})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := outbox.Emit(ctx, tx, outbox.Message{Type: "rolled.back", Payload: 1}, outbox.Prefix(name)); err != nil {
		t.Fatal(err)
	}
	tx.Rollback(ctx)
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	third := outbox.Message{ID: outbox.NewID(), Type: "order.shipped", Key: "o-1", Payload: map[string]string{"to": "Zürich"},
		Headers: map[string]string{"tenant": "t1"}}
	stx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := outbox.EmitSQL(ctx, stx, third, outbox.Prefix(name)); err != nil {
		t.Fatal(err)
	}
	if err := stx.Commit(); err != nil {
		t.Fatal(err)
	}

	got := peekMessages(t, conn, name)
	want := []message.Message{
		{ID: first.ID, Type: "order.placed", Key: "o-1", HasKey: true, Payload: []byte(`{"total": 42}`), PayloadJSON: true},
		{ID: second.ID, Type: "invoice.pdf", Payload: []byte{0x25, 0x50, 0xff, 0}},
		{ID: third.ID, Type: "order.shipped", Key: "o-1", HasKey: true, Payload: []byte(`{"to":"Zürich"}`), PayloadJSON: true, Headers: map[string]string{"tenant": "t1"}},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d messages, want %d: %+v", len(got), len(want), got)
	}
	for i, m := range got {
		w := want[i]
		if m.ID != w.ID || m.Type != w.Type || m.Key != w.Key || m.HasKey != w.HasKey || string(m.Payload) != string(w.Payload) ||
			m.PayloadJSON != w.PayloadJSON || len(m.Headers) != len(w.Headers) || m.Headers["tenant"] != w.Headers["tenant"] || m.CommitLSN == 0 {
			t.Errorf("message %d: got %+v, want %+v", i, m, w)
		}
	}
}

// peekMessages decodes the slot's pending changes as the relay does for a
// table-less outbox with the slot's name as the prefix.
func peekMessages(t *testing.T, conn *pgx.Conn, slot string) []message.Message {
	t.Helper()
	rows, err := conn.Query(context.Background(), `SELECT lsn::text, data FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL,
		'proto_version', '1', 'publication_names', $2::text, 'messages', 'true')`, slot, slot)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	d := decoder.New(decoder.Mapping{})
	d.AcceptMessages(slot)
	var out []message.Message
	for rows.Next() {
		var at string
		var data []byte
		if err := rows.Scan(&at, &data); err != nil {
			t.Fatal(err)
		}
		lsn, _ := pglogrepl.ParseLSN(at)
		ev, err := d.Decode(lsn, data)
		if err != nil {
			t.Fatalf("at %s: %v", at, err)
		}
		if ev.Kind == decoder.Row {
			out = append(out, *ev.Msg)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
