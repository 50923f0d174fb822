package inboxkafka_test

import (
	"context"
	"database/sql"
	"errors"
	"log"
	"os"
	"os/signal"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/inbox"
	"github.com/walpost/walpost/inbox/inboxkafka"
)

// Consume a topic that walpost's kafka sink fills: each record's effect
// commits once with its "id" header (the outbox id), and the record's
// offset is committed only after that.
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

	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: []string{"127.0.0.1:9092"},
		GroupID: "billing", // required: the loop commits the group's offsets
		Topic:   "outbox.order.placed",
	})
	defer r.Close()

	err = inboxkafka.Loop(ctx, r, ib, func(ctx context.Context, tx pgx.Tx, m kafka.Message) error {
		// m.Key is the outbox key, m.Value the payload.
		_, err := tx.Exec(ctx, `INSERT INTO invoices (order_id, body) VALUES ($1, $2)`, string(m.Key), m.Value)
		return err
	}, inboxkafka.Options{
		OnError: func(m kafka.Message, id string, err error) {
			log.Printf("message %s, retrying: %v", id, err)
		},
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
}

// A message whose effect keeps failing blocks its partition. MaxAttempts
// with OnPoison parks it (here in a table) and goes on; without OnPoison
// the loop stops at it, so that nothing is skipped without a decision.
func ExampleOptions_poison() {
	ctx := context.Background()
	db, err := sql.Open("pgx", "postgres://app@127.0.0.1:5432/billing") // import _ "github.com/jackc/pgx/v5/stdlib"
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	ib, err := inbox.NewSQL(db, inbox.Options{})
	if err != nil {
		log.Fatal(err)
	}
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{"127.0.0.1:9092"}, GroupID: "billing", Topic: "orders"})
	defer r.Close()

	opts := inboxkafka.Options{
		MaxAttempts: 5,
		OnPoison: func(ctx context.Context, m kafka.Message, cause error) error {
			// cause wraps inbox.ErrEmptyID (no id header) or
			// inbox.ErrTooManyAttempts and the effect's last error.
			_, err := db.ExecContext(ctx, `INSERT INTO parked (topic, part, off, value, error) VALUES ($1, $2, $3, $4, $5)`,
				m.Topic, m.Partition, m.Offset, m.Value, cause.Error())
			return err // nil: commit past it; an error: stop here
		},
	}
	err = inboxkafka.Loop(ctx, r, ib, func(ctx context.Context, tx *sql.Tx, m kafka.Message) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO orders_seen (body) VALUES ($1)`, m.Value)
		return err
	}, opts)
	log.Print(err)
}

// Consume a topic that walpost's kafka sink writes with exactly_once:
// true. Its batches are Kafka transactions: read them with
// isolation.level=read_committed through franz-go (kafka-go's Reader
// would hand Loop transaction markers and aborted records), and the
// effect runs once per message without even a Duplicate to skip.
func ExampleNewFranzReader() {
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

	cl, err := kgo.NewClient(
		kgo.SeedBrokers("127.0.0.1:9092"),
		kgo.ConsumerGroup("billing"),
		kgo.ConsumeTopics("outbox.order.placed"),
		kgo.DisableAutoCommit(), // the loop commits each offset after its effect
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()

	err = inboxkafka.Loop(ctx, inboxkafka.NewFranzReader(cl), ib, func(ctx context.Context, tx pgx.Tx, m kafka.Message) error {
		_, err := tx.Exec(ctx, `INSERT INTO invoices (order_id, body) VALUES ($1, $2)`, string(m.Key), m.Value)
		return err
	}, inboxkafka.Options{ReadCommitted: true})
	if err != nil && !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
}
