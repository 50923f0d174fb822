package outbox_test

import (
	"context"
	"log"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walpost/walpost/outbox"
)

// A Writer with DeleteAfterInsert keeps the outbox table empty: the row is
// inserted and deleted in the caller's transaction, and the relay streams
// the insert from the WAL. Nothing is left to replay (docs/configuration.md, "Keeping the
// outbox small").
func ExampleWriter_deleteAfterInsert() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@127.0.0.1:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	w := outbox.Writer{DeleteAfterInsert: true}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE documents SET signed_at = now() WHERE id = $1`, "doc-42"); err != nil {
			return err
		}
		return w.Enqueue(ctx, tx, outbox.Message{Type: "document.signed", Key: "doc-42", Payload: map[string]string{"document_id": "doc-42"}})
	})
	if err != nil {
		log.Fatal(err)
	}
}
