// Command consumer reads outbox messages as JSON lines on stdin (the
// relay's stdout sink) and creates one notification per document.signed
// message, dropping copies through the inbox. See ../README.md.
//
//	cdc run --config examples/signing/cdc.yaml | go run ./examples/signing/consumer -db postgres://postgres@127.0.0.1:5432/app
package main

import (
	"context"
	"flag"
	"log"
	"os"
	"os/signal"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walpost/walpost/examples/signing"
	"github.com/walpost/walpost/inbox"
)

func main() {
	db := flag.String("db", envOr("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres"), "PostgreSQL URL (default $DATABASE_URL)")
	table := flag.String("inbox", inbox.DefaultTable, "inbox table")
	flag.Parse()
	if err := run(*db, *table); err != nil {
		log.Fatal(err)
	}
}

func run(db, table string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	pool, err := pgxpool.New(ctx, db)
	if err != nil {
		return err
	}
	defer pool.Close()
	ib, err := inbox.New(pool, inbox.Options{Table: table})
	if err != nil {
		return err
	}
	if err := signing.SetupConsumer(ctx, pool, ib); err != nil {
		return err
	}
	return signing.Consume(ctx, ib, os.Stdin, os.Stdout)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
