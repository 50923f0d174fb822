package inboxnats_test

import (
	"context"
	"errors"
	"log"
	"os"
	"os/signal"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/walpost/walpost/inbox"
	"github.com/walpost/walpost/inbox/inboxnats"
)

// Consume the stream walpost's nats sink fills: each message's effect
// commits once with its Nats-Msg-Id (the outbox id), and the message is
// acknowledged only after that.
func ExampleLoop() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	pool, err := pgxpool.New(ctx, "postgres://app@127.0.0.1:5432/billing")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	ib, err := inbox.New(pool, inbox.Options{Table: "public.billing_inbox"})
	if err != nil {
		log.Fatal(err)
	}
	if err := ib.EnsureTable(ctx); err != nil {
		log.Fatal(err)
	}

	nc, err := nats.Connect("nats://127.0.0.1:4222")
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, "OUTBOX", jetstream.ConsumerConfig{
		Durable:       "billing",
		FilterSubject: "outbox.order.placed",
		AckPolicy:     jetstream.AckExplicitPolicy,
		MaxAckPending: 1, // a failing message is redelivered before the next: stream order kept
	})
	if err != nil {
		log.Fatal(err)
	}

	err = inboxnats.Loop(ctx, cons, ib, func(ctx context.Context, tx pgx.Tx, m jetstream.Msg) error {
		// Walpost-Key is the outbox key, m.Data() the payload.
		_, err := tx.Exec(ctx, `INSERT INTO invoices (order_id, body) VALUES ($1, $2)`, m.Headers().Get("Walpost-Key"), m.Data())
		return err
	}, inboxnats.Options{
		OnError: func(m jetstream.Msg, id string, err error) { log.Printf("message %s, retrying: %v", id, err) },
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
}
