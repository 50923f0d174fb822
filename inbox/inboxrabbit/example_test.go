package inboxrabbit_test

import (
	"context"
	"errors"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walpost/walpost/inbox"
	"github.com/walpost/walpost/inbox/inboxrabbit"
)

// Consume a queue bound to the exchange walpost's rabbitmq sink publishes
// to: each message's effect commits once per message_id (the outbox id),
// and the message is acknowledged only after that. When the connection
// drops, Loop returns and is called again on a new one.
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

	effect := func(ctx context.Context, tx pgx.Tx, d amqp.Delivery) error {
		// d.Type is the outbox type, d.Headers["key"] the outbox key,
		// d.Body the payload.
		_, err := tx.Exec(ctx, `INSERT INTO invoices (order_id, body) VALUES ($1, $2)`, d.Headers["key"], d.Body)
		return err
	}
	for attempt := 1; ctx.Err() == nil; attempt++ {
		err := consume(ctx, ib, effect)
		if errors.Is(err, context.Canceled) {
			return
		}
		log.Printf("consuming: %v; reconnecting", err)
		if err := inbox.SleepBackoff(ctx, attempt, 30*time.Second); err != nil {
			return
		}
	}
}

// consume runs the loop on a connection of its own until it fails or ctx
// ends.
func consume(ctx context.Context, ib *inbox.Inbox, effect func(context.Context, pgx.Tx, amqp.Delivery) error) error {
	conn, err := amqp.Dial("amqp://billing:secret@127.0.0.1:5672/")
	if err != nil {
		return err
	}
	defer conn.Close() // requeues what was delivered and not acknowledged
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	return inboxrabbit.Loop(ctx, ch, "billing.orders", ib, effect, inboxrabbit.Options{
		Prefetch: 16,
		OnError: func(d amqp.Delivery, id string, err error) {
			log.Printf("message %s, requeued after a wait: %v", id, err)
		},
	})
}

// A message whose effect keeps failing comes back again and again, each
// time after a longer wait. MaxAttempts with OnPoison parks it (here in a
// table) and rejects it, so that the queue's dead-letter exchange, if it
// has one, gets it too; without OnPoison the loop stops at it.
func ExampleOptions_poison() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@127.0.0.1:5432/billing")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	ib, err := inbox.New(pool, inbox.Options{})
	if err != nil {
		log.Fatal(err)
	}
	conn, err := amqp.Dial("amqp://billing:secret@127.0.0.1:5672/")
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		log.Fatal(err)
	}
	opts := inboxrabbit.Options{
		MaxAttempts: 5,
		OnPoison: func(ctx context.Context, d amqp.Delivery, cause error) error {
			// cause wraps inbox.ErrEmptyID (no message_id) or
			// inbox.ErrTooManyAttempts and the effect's last error.
			_, err := pool.Exec(ctx, `INSERT INTO parked (message_id, body, error) VALUES ($1, $2, $3)`,
				d.MessageId, d.Body, cause.Error())
			return err // nil: reject it and go on; an error: stop here
		},
	}
	err = inboxrabbit.Loop(ctx, ch, "billing.orders", ib, func(ctx context.Context, tx pgx.Tx, d amqp.Delivery) error {
		_, err := tx.Exec(ctx, `INSERT INTO orders_seen (body) VALUES ($1)`, d.Body)
		return err
	}, opts)
	log.Print(err)
}
