package outbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walpost/walpost/outbox"
)

// A table-less outbox (the relay's postgres.source: messages): the
// message is a transactional logical message of the transaction that
// changes the state, in the WAL only if it commits. No outbox table, no
// cleanup.
func ExampleEmit() {
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

	if _, err := tx.Exec(ctx, `UPDATE orders SET status = 'paid' WHERE id = $1`, "o-7"); err != nil {
		log.Fatal(err)
	}
	err = outbox.Emit(ctx, tx, outbox.Message{
		Type:    "order.paid",
		Key:     "o-7",
		Payload: map[string]any{"order_id": "o-7", "amount": 42},
	}) // outbox.Prefix("…") when postgres.message_prefix is not walpost
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}
}

// The envelope is the contract between producers and the relay: a
// producer in another language writes the same JSON with
// pg_logical_emit_message(true, 'walpost', envelope).
func ExampleEnvelope() {
	env, err := outbox.Envelope(context.Background(), outbox.Message{
		ID:      "0190f5c2-6a8e-7cc0-9a4e-0e7d6c1b2a31",
		Type:    "order.paid",
		Key:     "o-7",
		Payload: json.RawMessage(`{"order_id": "o-7", "amount": 42}`),
		Headers: map[string]string{"tenant": "acme"},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(env))
	bin, err := outbox.Envelope(context.Background(), outbox.Message{
		ID: "0190f5c2-6a8e-7cc0-9a4e-0e7d6c1b2a32", Type: "invoice.pdf", Payload: []byte("%PDF-1.7\n"),
	}, outbox.BinaryPayload())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(bin))
	// Output:
	// {"v":1,"id":"0190f5c2-6a8e-7cc0-9a4e-0e7d6c1b2a31","type":"order.paid","key":"o-7","headers":{"tenant":"acme"},"payload":{"order_id": "o-7", "amount": 42}}
	// {"v":1,"id":"0190f5c2-6a8e-7cc0-9a4e-0e7d6c1b2a32","type":"invoice.pdf","payload_base64":"JVBERi0xLjcK"}
}
