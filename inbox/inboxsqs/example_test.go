package inboxsqs_test

import (
	"context"
	"errors"
	"log"
	"os"
	"os/signal"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walpost/walpost/inbox"
	"github.com/walpost/walpost/inbox/inboxsqs"
)

// Receive from an SQS queue that walpost's sqs sink fills: each message's
// effect commits once with its outbox id (the id attribute), and the
// message is deleted only after that commit.
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

	cfg, err := awsconfig.LoadDefaultConfig(ctx) // needs sqs:ReceiveMessage, DeleteMessage, ChangeMessageVisibility
	if err != nil {
		log.Fatal(err)
	}
	client := sqs.NewFromConfig(cfg)
	const queue = "https://sqs.eu-central-1.amazonaws.com/123456789012/documents.fifo"

	err = inboxsqs.Loop(ctx, client, queue, ib, func(ctx context.Context, tx pgx.Tx, msg types.Message) error {
		payload, err := inboxsqs.Payload(msg)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO notifications (message_id, kind, body) VALUES ($1, $2, $3)`,
			inboxsqs.MessageID(msg), *msg.MessageAttributes["type"].StringValue, payload)
		return err
	}, inboxsqs.Options{
		OnError: func(msg types.Message, err error) { log.Print(err) },
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
}
