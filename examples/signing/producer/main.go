// Command producer signs a document: it records the signature and a
// "document.signed" outbox message in one transaction. See ../README.md.
//
//	go run ./examples/signing/producer -db postgres://postgres@127.0.0.1:5432/app -doc doc-42 -by ada
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walpost/walpost/examples/signing"
)

func main() {
	db := flag.String("db", envOr("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres"), "PostgreSQL URL (default $DATABASE_URL)")
	doc := flag.String("doc", "doc-42", "id of the document to sign")
	by := flag.String("by", "ada", "who signs it")
	flag.Parse()
	if err := run(*db, *doc, *by); err != nil {
		log.Fatal(err)
	}
}

func run(db, doc, by string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	pool, err := pgxpool.New(ctx, db)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := signing.SetupProducer(ctx, pool); err != nil {
		return err
	}
	id, err := signing.Sign(ctx, pool, doc, by)
	if err != nil {
		return err
	}
	fmt.Printf("document %s signed by %s; message %s enqueued\n", doc, by, id)
	return nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
