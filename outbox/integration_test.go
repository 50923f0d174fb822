package outbox_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/outbox"
)

// row is an outbox row read back from the database.
type row struct {
	ID, Type string
	Key      *string
	Payload  any
	Headers  map[string]string
}

// newTable creates a fresh outbox table with outbox.DDL and returns its
// schema-qualified name.
func newTable(t *testing.T) string {
	t.Helper()
	table := "public." + pgtest.Name(t, "outbox")
	pgtest.Exec(t, pgtest.URL(t), outbox.DDL(table))
	return table
}

// readRows returns the rows of table (default columns) in insertion order.
func readRows(t *testing.T, conn *pgx.Conn, table string) []row {
	t.Helper()
	ident := pgx.Identifier{"public", table[len("public."):]}.Sanitize()
	rows, err := conn.Query(context.Background(),
		`SELECT id::text, type, key, payload::text, headers::text FROM `+ident+` ORDER BY created_at, ctid`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []row
	for rows.Next() {
		var r row
		var payload string
		var headers *string
		if err := rows.Scan(&r.ID, &r.Type, &r.Key, &payload, &headers); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(payload), &r.Payload); err != nil {
			t.Fatal(err)
		}
		if headers != nil {
			if err := json.Unmarshal([]byte(*headers), &r.Headers); err != nil {
				t.Fatal(err)
			}
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func ptr(s string) *string { return &s }

// enqueuer runs enqueue inside a transaction of one driver, committing or
// rolling back afterwards.
type enqueuer struct {
	name string
	run  func(t *testing.T, url string, w outbox.Writer, ctx context.Context, msgs []outbox.Message, commit bool) error
}

var enqueuers = []enqueuer{
	{"pgx", func(t *testing.T, url string, w outbox.Writer, ctx context.Context, msgs []outbox.Message, commit bool) error {
		conn := pgtest.Connect(t, url)
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		for _, m := range msgs {
			if err := w.Enqueue(ctx, tx, m); err != nil {
				return err
			}
		}
		if commit {
			return tx.Commit(ctx)
		}
		return tx.Rollback(ctx)
	}},
	{"database/sql", func(t *testing.T, url string, w outbox.Writer, ctx context.Context, msgs []outbox.Message, commit bool) error {
		db, err := sql.Open("pgx", url)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		for _, m := range msgs {
			if err := w.EnqueueSQL(ctx, tx, m); err != nil {
				return err
			}
		}
		if commit {
			return tx.Commit()
		}
		return tx.Rollback()
	}},
}

func TestIntegrationEnqueueWritesTheRowInTheCallersTransaction(t *testing.T) {
	for _, e := range enqueuers {
		t.Run(e.name, func(t *testing.T) {
			url := pgtest.URL(t)
			table := newTable(t)
			type signed struct {
				Document string `json:"document"`
				By       string `json:"by"`
			}
			msgs := []outbox.Message{
				{
					ID: "0190b6a4-7a4c-7cc2-9f1e-6f1d3c1f7a10", Type: "document.signed", Key: "doc-1",
					Payload: signed{Document: "doc-1", By: "ada"},
					Headers: map[string]string{"tenant": "acme", "content-type": "application/json"},
				},
				{ID: "0190b6a4-7a4c-7cc2-9f1e-6f1d3c1f7a11", Type: "raw", Payload: json.RawMessage(`{"n": [1, 2.5, "x"]}`)},
				{ID: "0190b6a4-7a4c-7cc2-9f1e-6f1d3c1f7a12", Type: "bytes", Payload: []byte(`"just a string"`)},
				{ID: "0190b6a4-7a4c-7cc2-9f1e-6f1d3c1f7a13", Type: "null", Payload: json.RawMessage(`null`)},
			}
			if err := e.run(t, url, outbox.Writer{Table: table}, context.Background(), msgs, true); err != nil {
				t.Fatal(err)
			}
			want := []row{
				{ID: msgs[0].ID, Type: "document.signed", Key: ptr("doc-1"),
					Payload: map[string]any{"document": "doc-1", "by": "ada"},
					Headers: map[string]string{"tenant": "acme", "content-type": "application/json"}},
				{ID: msgs[1].ID, Type: "raw", Payload: map[string]any{"n": []any{1.0, 2.5, "x"}}},
				{ID: msgs[2].ID, Type: "bytes", Payload: "just a string"},
				{ID: msgs[3].ID, Type: "null", Payload: nil},
			}
			if got := readRows(t, pgtest.Connect(t, url), table); !reflect.DeepEqual(got, want) {
				t.Fatalf("rows\n got %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestIntegrationRolledBackTransactionLeavesNoMessage(t *testing.T) {
	for _, e := range enqueuers {
		t.Run(e.name, func(t *testing.T) {
			url := pgtest.URL(t)
			table := newTable(t)
			msg := outbox.Message{Type: "document.signed", Payload: map[string]string{"document": "doc-1"}}
			if err := e.run(t, url, outbox.Writer{Table: table}, context.Background(), []outbox.Message{msg, msg}, false); err != nil {
				t.Fatal(err)
			}
			if got := readRows(t, pgtest.Connect(t, url), table); len(got) != 0 {
				t.Fatalf("rolled-back transaction left %d rows: %+v", len(got), got)
			}
		})
	}
}

func TestIntegrationDefaultIDIsAUUIDv7AndEmptyKeyAndHeadersAreNull(t *testing.T) {
	for _, e := range enqueuers {
		t.Run(e.name, func(t *testing.T) {
			url := pgtest.URL(t)
			table := newTable(t)
			msgs := []outbox.Message{{Type: "a", Payload: 1}, {Type: "b", Payload: 2}}
			if err := e.run(t, url, outbox.Writer{Table: table}, context.Background(), msgs, true); err != nil {
				t.Fatal(err)
			}
			got := readRows(t, pgtest.Connect(t, url), table)
			if len(got) != 2 {
				t.Fatalf("got %d rows, want 2", len(got))
			}
			for _, r := range got {
				u, err := uuid.Parse(r.ID)
				if err != nil {
					t.Fatalf("id %q: %v", r.ID, err)
				}
				if u.Version() != 7 {
					t.Errorf("id %s is a version %d UUID, want 7", r.ID, u.Version())
				}
				if r.Key != nil || r.Headers != nil {
					t.Errorf("empty key/headers stored as %v/%v, want NULL", r.Key, r.Headers)
				}
			}
			if got[0].ID == got[1].ID {
				t.Fatalf("two messages got the same id %s", got[0].ID)
			}
		})
	}
}

func TestIntegrationTraceparentIsStoredInHeaders(t *testing.T) {
	const fromHook = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	const explicit = "00-11111111111111111111111111111111-2222222222222222-00"
	for _, e := range enqueuers {
		t.Run(e.name, func(t *testing.T) {
			url := pgtest.URL(t)
			table := newTable(t)
			ctx := outbox.ContextWithTraceparent(context.Background(), validTP)

			// From the context, next to the message's own headers.
			if err := e.run(t, url, outbox.Writer{Table: table}, ctx, []outbox.Message{
				{Type: "ctx", Payload: 1, Headers: map[string]string{"tenant": "acme"}},
			}, true); err != nil {
				t.Fatal(err)
			}
			// The hook wins over the context; an explicit header wins over both.
			hook := outbox.Writer{Table: table, Traceparent: func(context.Context) string { return fromHook }}
			if err := e.run(t, url, hook, ctx, []outbox.Message{
				{Type: "hook", Payload: 1},
				{Type: "explicit", Payload: 1, Headers: map[string]string{"traceparent": explicit}},
			}, true); err != nil {
				t.Fatal(err)
			}
			// A hook returning "" falls back to the context.
			empty := outbox.Writer{Table: table, Traceparent: func(context.Context) string { return "" }}
			if err := e.run(t, url, empty, ctx, []outbox.Message{{Type: "fallback", Payload: 1}}, true); err != nil {
				t.Fatal(err)
			}

			want := map[string]map[string]string{
				"ctx":      {"tenant": "acme", "traceparent": validTP},
				"hook":     {"traceparent": fromHook},
				"explicit": {"traceparent": explicit},
				"fallback": {"traceparent": validTP},
			}
			got := map[string]map[string]string{}
			for _, r := range readRows(t, pgtest.Connect(t, url), table) {
				got[r.Type] = r.Headers
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("headers by type\n got %v\nwant %v", got, want)
			}
		})
	}
}

func TestIntegrationCustomTableAndColumnNames(t *testing.T) {
	for _, e := range enqueuers {
		t.Run(e.name, func(t *testing.T) {
			url := pgtest.URL(t)
			schema := pgtest.Name(t, "Sales") // upper case: names are taken literally
			table := pgx.Identifier{schema, "Outbox Events"}
			pgtest.Exec(t, url,
				`CREATE SCHEMA `+pgx.Identifier{schema}.Sanitize(),
				`CREATE TABLE `+table.Sanitize()+` (
					event_id uuid PRIMARY KEY,
					"Event Type" text NOT NULL,
					aggregate_id text,
					body jsonb NOT NULL,
					meta jsonb,
					"order" bigserial)`,
				// A Debezium-style table: no headers column.
				`CREATE TABLE `+pgx.Identifier{schema, "debezium"}.Sanitize()+` (
					id uuid PRIMARY KEY, type text NOT NULL, aggregateid text, payload jsonb NOT NULL)`)

			w := outbox.Writer{
				Table:   schema + ".Outbox Events",
				Columns: outbox.Columns{ID: "event_id", Type: "Event Type", Key: "aggregate_id", Payload: "body", Headers: "meta"},
			}
			ctx := outbox.ContextWithTraceparent(context.Background(), validTP)
			msg := outbox.Message{ID: "0190b6a4-7a4c-7cc2-9f1e-6f1d3c1f7a10", Type: "order.placed", Key: "o-7", Payload: map[string]int{"total": 42}}
			if err := e.run(t, url, w, ctx, []outbox.Message{msg}, true); err != nil {
				t.Fatal(err)
			}
			dbz := outbox.Writer{Table: schema + ".debezium", Columns: outbox.Columns{Key: "aggregateid", Headers: outbox.Omit}}
			if err := e.run(t, url, dbz, ctx, []outbox.Message{msg}, true); err != nil {
				t.Fatalf("Debezium-style table (traceparent from the context is dropped, not an error): %v", err)
			}

			conn := pgtest.Connect(t, url)
			var id, typ, key, body, meta string
			if err := conn.QueryRow(context.Background(),
				`SELECT event_id::text, "Event Type", aggregate_id, body::text, meta::text FROM `+table.Sanitize(),
			).Scan(&id, &typ, &key, &body, &meta); err != nil {
				t.Fatal(err)
			}
			if id != msg.ID || typ != msg.Type || key != msg.Key || body != `{"total": 42}` || meta != `{"traceparent": "`+validTP+`"}` {
				t.Fatalf("custom table row = %s %s %s %s %s", id, typ, key, body, meta)
			}
			if err := conn.QueryRow(context.Background(),
				`SELECT id::text, type, aggregateid, payload::text FROM `+pgx.Identifier{schema, "debezium"}.Sanitize(),
			).Scan(&id, &typ, &key, &body); err != nil {
				t.Fatal(err)
			}
			if id != msg.ID || typ != msg.Type || key != msg.Key || body != `{"total": 42}` {
				t.Fatalf("Debezium-style row = %s %s %s %s", id, typ, key, body)
			}
		})
	}
}

func TestIntegrationDatabaseErrorNamesTheMessage(t *testing.T) {
	url := pgtest.URL(t)
	table := newTable(t)
	msg := outbox.Message{ID: "not-a-uuid", Type: "t", Payload: 1}
	err := enqueuers[0].run(t, url, outbox.Writer{Table: table}, context.Background(), []outbox.Message{msg}, true)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "22P02" { // invalid_text_representation
		t.Fatalf("error = %v, want the database's invalid uuid error", err)
	}
	if want := "not-a-uuid"; !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not name message %s", err, want)
	}
}
