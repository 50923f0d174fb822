package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walpost/walpost/outbox"
)

// failing is a PgxExecer whose DELETE fails.
type failing struct{ recorder }

var errRefused = errors.New("permission denied for table outbox")

func (f *failing) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	f.recorder.Exec(ctx, sql, args...)
	if strings.HasPrefix(sql, "DELETE") {
		return pgconn.CommandTag{}, errRefused
	}
	return pgconn.NewCommandTag("INSERT 0 1"), nil
}

func TestDeleteAfterInsertDeletesTheRowItInsertedInTheSameTransaction(t *testing.T) {
	ctx := context.Background()
	w := outbox.Writer{Table: "Sales.Outbox", Columns: outbox.Columns{ID: "Message Id"}, DeleteAfterInsert: true}
	var pg recorder
	if err := w.Enqueue(ctx, &pg, outbox.Message{ID: "0190b9a2-0000-7000-8000-000000000001", Type: "t", Payload: 1}); err != nil {
		t.Fatal(err)
	}
	var db recorder
	if err := w.EnqueueSQL(ctx, sqlExecer{&db}, outbox.Message{ID: "0190b9a2-0000-7000-8000-000000000002", Type: "t", Payload: 1}); err != nil {
		t.Fatal(err)
	}
	for i, r := range []*recorder{&pg, &db} {
		if len(r.stmts) != 2 || !strings.HasPrefix(r.stmts[0], "INSERT") {
			t.Fatalf("want an INSERT then a DELETE on the same execer, got %q", r.stmts)
		}
		if want := `DELETE FROM "Sales"."Outbox" WHERE "Message Id" = $1`; r.stmts[1] != want {
			t.Fatalf("DELETE is %q, want %q", r.stmts[1], want)
		}
		if r.args[1][0] != r.args[0][0] || r.args[1][0] != "0190b9a2-0000-7000-8000-00000000000"+string(rune('1'+i)) {
			t.Fatalf("DELETE args %v, INSERT id %v", r.args[1], r.args[0][0])
		}
	}

	var plain recorder
	if err := (outbox.Writer{Table: "public.outbox"}).Enqueue(ctx, &plain, outbox.Message{Type: "t", Payload: 1}); err != nil {
		t.Fatal(err)
	}
	if len(plain.stmts) != 1 {
		t.Fatalf("without DeleteAfterInsert, want the INSERT alone, got %q", plain.stmts)
	}

	f := &failing{}
	err := w.Enqueue(ctx, f, outbox.Message{ID: "0190b9a2-0000-7000-8000-000000000003", Type: "t", Payload: 1})
	if !errors.Is(err, errRefused) || !strings.Contains(err.Error(), "DeleteAfterInsert") || !strings.Contains(err.Error(), "0190b9a2-0000-7000-8000-000000000003") {
		t.Fatalf("a failing DELETE must be returned, naming the option and the message: %v", err)
	}
}

// sqlExecer adapts a recorder to SQLExecer.
type sqlExecer struct{ r *recorder }

func (s sqlExecer) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return s.r.ExecContext(ctx, query, args...)
}
