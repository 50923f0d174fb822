package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walpost/walpost/outbox"
)

// DDL gives the statement that creates the outbox table; walpost's
// "cdc init" runs it when the table is missing.
func ExampleDDL() {
	fmt.Print(outbox.DDL("app.outbox"))
	// Output:
	// CREATE TABLE IF NOT EXISTS app.outbox (
	//     id         uuid        PRIMARY KEY,
	//     type       text        NOT NULL,
	//     key        text        NULL,
	//     payload    jsonb       NOT NULL,
	//     headers    jsonb       NULL,
	//     created_at timestamptz NOT NULL DEFAULT now(),
	//     seq        bigint      GENERATED ALWAYS AS IDENTITY
	// );
}

// The state change and the message commit together, or not at all.
func ExampleEnqueue() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@127.0.0.1:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx) // no-op after Commit

	if _, err := tx.Exec(ctx, `UPDATE documents SET signed_at = now(), signed_by = $2 WHERE id = $1`, "doc-42", "ada"); err != nil {
		log.Fatal(err)
	}
	err = outbox.Enqueue(ctx, tx, outbox.Message{
		Type:    "document.signed",
		Key:     "doc-42", // messages about one document keep their order
		Payload: map[string]string{"document_id": "doc-42", "signed_by": "ada"},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}
}

// With database/sql, open the database with pgx's stdlib driver and use
// EnqueueSQL.
func ExampleEnqueueSQL() {
	ctx := context.Background()
	db, err := sql.Open("pgx", "postgres://app@127.0.0.1:5432/app") // import _ "github.com/jackc/pgx/v5/stdlib"
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()

	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, total) VALUES ($1, $2)`, "o-7", 42); err != nil {
		log.Fatal(err)
	}
	id := outbox.NewID() // known before the commit, e.g. for logging
	err = outbox.EnqueueSQL(ctx, tx, outbox.Message{
		ID:      id,
		Type:    "order.placed",
		Key:     "o-7",
		Payload: []byte(`{"order_id":"o-7","total":42}`),
		Headers: map[string]string{"tenant": "acme"},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
	log.Printf("order o-7 placed, message %s", id)
}

// A Writer matches an existing table, here one laid out like Debezium's
// outbox, with no headers column. Use the same names in the relay's
// "columns:" config.
func ExampleWriter() {
	w := outbox.Writer{
		Table: "sales.outboxevent",
		Columns: outbox.Columns{
			Type:    "type",
			Key:     "aggregateid",
			Payload: "payload",
			Headers: outbox.Omit,
		},
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@127.0.0.1:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := w.Enqueue(ctx, tx, outbox.Message{Type: "order.shipped", Key: "o-7", Payload: map[string]any{"carrier": "dhl"}}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}
}

// An incoming request's traceparent travels with the messages written while
// handling it.
func ExampleContextWithTraceparent() {
	incoming := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" // e.g. r.Header.Get("traceparent")
	ctx := outbox.ContextWithTraceparent(context.Background(), incoming)
	fmt.Println(outbox.TraceparentFromContext(ctx))

	// A malformed value is ignored, as W3C Trace Context requires.
	ctx = outbox.ContextWithTraceparent(context.Background(), "00-not-a-trace")
	fmt.Printf("%q\n", outbox.TraceparentFromContext(ctx))
	// Output:
	// 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
	// ""
}
