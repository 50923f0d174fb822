package inboxpubsub_test

import (
	"context"
	"errors"
	"log"
	"os"
	"os/signal"

	gps "cloud.google.com/go/pubsub/v2"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walpost/walpost/inbox"
	"github.com/walpost/walpost/inbox/inboxpubsub"
)

// Receive from a Pub/Sub subscription (with message ordering on) of the
// topic walpost's pubsub sink publishes to: each message's effect
// commits once with its outbox id, and the message is acked only after
// that commit.
func ExampleLoop() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	pool, err := pgxpool.New(ctx, "postgres://app@127.0.0.1:5432/notifications")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	ib, err := inbox.New(pool, inbox.Options{Table: "public.notifications_inbox"})
	if err != nil {
		log.Fatal(err)
	}
	if err := ib.EnsureTable(ctx); err != nil {
		log.Fatal(err)
	}

	client, err := gps.NewClient(ctx, "orders-prod") // ADC; needs roles/pubsub.subscriber
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	sub := client.Subscriber("notifications")

	err = inboxpubsub.Loop(ctx, sub, ib, func(ctx context.Context, tx pgx.Tx, msg *gps.Message) error {
		_, err := tx.Exec(ctx, `INSERT INTO notifications (message_id, kind, body) VALUES ($1, $2, $3)`,
			inboxpubsub.MessageID(msg), msg.Attributes["type"], msg.Data)
		return err
	}, inboxpubsub.Options{
		OnError: func(msg *gps.Message, err error) { log.Print(err) },
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
}
