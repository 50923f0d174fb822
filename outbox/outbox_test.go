package outbox_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/outbox"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

const validTP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// recorder is a PgxExecer and SQLExecer that records statements.
type recorder struct {
	stmts []string
	args  [][]any
}

func (r *recorder) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	r.stmts = append(r.stmts, sql)
	r.args = append(r.args, args)
	return pgconn.NewCommandTag("INSERT 0 1"), nil
}

func (r *recorder) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	_, err := r.Exec(ctx, query, args...)
	return nil, err
}

func TestDDLMatchesSQLFile(t *testing.T) {
	b, err := os.ReadFile("../sql/outbox.sql")
	if err != nil {
		t.Fatal(err)
	}
	if got := outbox.DDL(outbox.DefaultTable); got != string(b) {
		t.Fatalf("sql/outbox.sql and outbox.DDL(%q) differ; update one to match the other.\nfile:\n%s\nDDL:\n%s",
			outbox.DefaultTable, b, got)
	}
	if outbox.DDL("") != outbox.DDL(outbox.DefaultTable) {
		t.Fatal(`DDL("") is not the DDL of the default table`)
	}
}

func TestDDLQuotesNamePartsOnlyWhereNeeded(t *testing.T) {
	for name, want := range map[string]string{
		"outbox":             "outbox",
		"app.outbox_v2":      "app.outbox_v2",
		"Sales.Outbox":       `"Sales"."Outbox"`,
		"public.order":       `public."order"`,
		`my schema.out"box`:  `"my schema"."out""box"`,
		"public.2024_outbox": `public."2024_outbox"`,
	} {
		if got := outbox.DDL(name); !strings.HasPrefix(got, "CREATE TABLE IF NOT EXISTS "+want+" (\n") {
			t.Errorf("DDL(%q) starts %q, want table rendered as %s", name, strings.SplitN(got, "\n", 2)[0], want)
		}
	}
}

func TestEnqueueRejectsBadMessagesWithoutWriting(t *testing.T) {
	for _, tc := range []struct {
		name string
		msg  outbox.Message
		want error
	}{
		{"invalid JSON bytes", outbox.Message{Type: "t", Payload: []byte(`{"a":`)}, outbox.ErrInvalidPayload},
		{"empty bytes", outbox.Message{Type: "t", Payload: []byte{}}, outbox.ErrInvalidPayload},
		{"invalid RawMessage", outbox.Message{Type: "t", Payload: json.RawMessage(`not json`)}, outbox.ErrInvalidPayload},
		{"unmarshallable value", outbox.Message{Type: "t", Payload: func() {}}, outbox.ErrInvalidPayload},
		{"nil payload", outbox.Message{Type: "t"}, outbox.ErrNoPayload},
		{"no type", outbox.Message{Payload: json.RawMessage(`{}`)}, outbox.ErrNoType},
		{"bad traceparent header", outbox.Message{Type: "t", Payload: 1, Headers: map[string]string{"traceparent": "00-xyz"}}, outbox.ErrInvalidTraceparent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r recorder
			err := outbox.Enqueue(context.Background(), &r, tc.msg)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Enqueue error = %v, want %v", err, tc.want)
			}
			if err := outbox.EnqueueSQL(context.Background(), &r, tc.msg); !errors.Is(err, tc.want) {
				t.Fatalf("EnqueueSQL error = %v, want %v", err, tc.want)
			}
			if len(r.stmts) != 0 {
				t.Fatalf("a rejected message was written: %q", r.stmts)
			}
		})
	}
}

func TestWriterRejectsUnusableTableAndColumns(t *testing.T) {
	msg := outbox.Message{Type: "t", Payload: 1}
	for _, tc := range []struct {
		name string
		w    outbox.Writer
		msg  outbox.Message
		want error
	}{
		{"three-part table", outbox.Writer{Table: "db.public.outbox"}, msg, outbox.ErrInvalidTable},
		{"empty part", outbox.Writer{Table: "public."}, msg, outbox.ErrInvalidTable},
		{"omitted id", outbox.Writer{Columns: outbox.Columns{ID: outbox.Omit}}, msg, outbox.ErrInvalidColumns},
		{"omitted payload", outbox.Writer{Columns: outbox.Columns{Payload: outbox.Omit}}, msg, outbox.ErrInvalidColumns},
		{"key without key column", outbox.Writer{Columns: outbox.Columns{Key: outbox.Omit}},
			outbox.Message{Type: "t", Key: "k", Payload: 1}, outbox.ErrNoKeyColumn},
		{"headers without headers column", outbox.Writer{Columns: outbox.Columns{Headers: outbox.Omit}},
			outbox.Message{Type: "t", Payload: 1, Headers: map[string]string{"a": "b"}}, outbox.ErrNoHeadersColumn},
		{"hook returns malformed traceparent", outbox.Writer{Traceparent: func(context.Context) string { return "nope" }},
			msg, outbox.ErrInvalidTraceparent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r recorder
			if err := tc.w.Enqueue(context.Background(), &r, tc.msg); !errors.Is(err, tc.want) {
				t.Fatalf("error = %v, want %v", err, tc.want)
			}
			if len(r.stmts) != 0 {
				t.Fatalf("written despite the error: %q", r.stmts)
			}
		})
	}
}

func TestEnqueueQuotesEveryIdentifier(t *testing.T) {
	var r recorder
	w := outbox.Writer{
		Table:   `Sales.out"box`,
		Columns: outbox.Columns{ID: "event_id", Type: "Event Type", Key: outbox.Omit, Payload: "body", Headers: outbox.Omit},
	}
	if err := w.Enqueue(context.Background(), &r, outbox.Message{ID: "x", Type: "t", Payload: 1}); err != nil {
		t.Fatal(err)
	}
	want := `INSERT INTO "Sales"."out""box" ("event_id", "Event Type", "body") VALUES ($1, $2, $3)`
	if r.stmts[0] != want {
		t.Fatalf("statement\n got %s\nwant %s", r.stmts[0], want)
	}
}

func TestEnqueueLeavesCallersHeadersUnchanged(t *testing.T) {
	var r recorder
	h := map[string]string{"a": "b"}
	ctx := outbox.ContextWithTraceparent(context.Background(), validTP)
	if err := outbox.Enqueue(ctx, &r, outbox.Message{Type: "t", Payload: 1, Headers: h}); err != nil {
		t.Fatal(err)
	}
	if len(h) != 1 {
		t.Fatalf("caller's headers were modified: %v", h)
	}
	var stored map[string]string
	if err := json.Unmarshal(r.args[0][4].([]byte), &stored); err != nil {
		t.Fatal(err)
	}
	if stored["a"] != "b" || stored["traceparent"] != validTP {
		t.Fatalf("stored headers = %v", stored)
	}
}

func TestValidateTraceparentFollowsW3CFormat(t *testing.T) {
	for tp, ok := range map[string]bool{
		validTP: true,
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00":        true,
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future": true, // later versions may add fields
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01":        true,
		"": false,
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra": false, // version 00 has exactly four fields
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x":      false,
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01":       false,
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01":       false, // upper case
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01":       false,
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01":       false,
		"00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01":       false, // misplaced dash
		"00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01":       false,
		"0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01":       false,
	} {
		err := outbox.ValidateTraceparent(tp)
		if ok && err != nil {
			t.Errorf("ValidateTraceparent(%q) = %v, want nil", tp, err)
		}
		if !ok && !errors.Is(err, outbox.ErrInvalidTraceparent) {
			t.Errorf("ValidateTraceparent(%q) = %v, want ErrInvalidTraceparent", tp, err)
		}
	}
}

func TestContextWithTraceparentIgnoresMalformedValues(t *testing.T) {
	ctx := outbox.ContextWithTraceparent(context.Background(), validTP)
	if got := outbox.TraceparentFromContext(ctx); got != validTP {
		t.Fatalf("TraceparentFromContext = %q, want %q", got, validTP)
	}
	ctx = outbox.ContextWithTraceparent(ctx, "garbage")
	if got := outbox.TraceparentFromContext(ctx); got != validTP {
		t.Fatalf("a malformed traceparent replaced the valid one: got %q", got)
	}
	if got := outbox.TraceparentFromContext(context.Background()); got != "" {
		t.Fatalf("TraceparentFromContext(empty) = %q", got)
	}
}
