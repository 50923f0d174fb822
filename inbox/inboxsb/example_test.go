package inboxsb_test

import (
	"context"
	"errors"
	"log"
	"os"
	"os/signal"

	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walpost/walpost/inbox"
	"github.com/walpost/walpost/inbox/inboxsb"
)

// Receive from a Service Bus queue that walpost's servicebus sink fills:
// each message's effect commits once with its MessageId (the outbox id),
// and the message is completed only after that commit.
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

	cred, err := azidentity.NewDefaultAzureCredential(nil) // the identity needs Azure Service Bus Data Receiver
	if err != nil {
		log.Fatal(err)
	}
	client, err := azservicebus.NewClient("walpost.servicebus.windows.net", cred, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(context.Background())
	receiver, err := client.NewReceiverForQueue("documents", nil) // peek-lock, the default
	if err != nil {
		log.Fatal(err)
	}
	defer receiver.Close(context.Background())

	err = inboxsb.Loop(ctx, receiver, ib, func(ctx context.Context, tx pgx.Tx, msg *azservicebus.ReceivedMessage) error {
		// msg.Subject is the outbox type, msg.Body the payload.
		_, err := tx.Exec(ctx, `INSERT INTO notifications (message_id, kind, body) VALUES ($1, $2, $3)`,
			msg.MessageID, *msg.Subject, msg.Body)
		return err
	}, inboxsb.Options{
		OnError: func(msg *azservicebus.ReceivedMessage, err error) {
			log.Printf("message %s (delivery %d): %v", msg.MessageID, msg.DeliveryCount, err)
		},
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
}
