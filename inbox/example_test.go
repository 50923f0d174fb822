package inbox_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walpost/walpost/inbox"
)

// DDL gives the inbox table's definition; EnsureTable runs it.
func ExampleDDL() {
	fmt.Print(inbox.DDL("billing.inbox"))
	// Output:
	// CREATE TABLE IF NOT EXISTS billing.inbox (
	//     id           text        PRIMARY KEY,
	//     processed_at timestamptz NOT NULL DEFAULT now()
	// );
	// CREATE INDEX IF NOT EXISTS inbox_processed_at_idx ON billing.inbox (processed_at);
}

// received stands for a message from any broker client.
type received struct {
	ID      string // the outbox id: Kafka header "id", Service Bus MessageId
	Payload []byte
}

// Process a message, then acknowledge it: the notification is created once
// however often the message arrives.
func ExampleInbox_Process() {
	ctx := context.Background()
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

	msg := received{ID: "0190b6a4-7a4c-7cc2-9f1e-6f1d3c1f7a10", Payload: []byte(`{"document_id":"doc-42","signed_by":"ada"}`)}
	res, err := ib.Process(ctx, msg.ID, func(ctx context.Context, tx pgx.Tx) error {
		var ev struct {
			DocumentID string `json:"document_id"`
			SignedBy   string `json:"signed_by"`
		}
		if err := json.Unmarshal(msg.Payload, &ev); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO notifications (document_id, text) VALUES ($1, $2)`,
			ev.DocumentID, ev.SignedBy+" signed the document")
		return err
	})
	if err != nil {
		log.Printf("message %s not processed, leaving it for redelivery: %v", msg.ID, err)
		return // do not acknowledge
	}
	log.Printf("message %s: %s", msg.ID, res) // processed or duplicate: acknowledge now
}

// With database/sql the effect gets a *sql.Tx.
func ExampleSQLInbox_Process() {
	ctx := context.Background()
	db, err := sql.Open("pgx", "postgres://app@127.0.0.1:5432/ledger") // import _ "github.com/jackc/pgx/v5/stdlib"
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	ib, err := inbox.NewSQL(db, inbox.Options{})
	if err != nil {
		log.Fatal(err)
	}

	res, err := ib.Process(ctx, "0190b6a4-7a4c-7cc2-9f1e-6f1d3c1f7a11", func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE accounts SET balance = balance + $2 WHERE id = $1`, "acct-1", 100)
		return err // a counter: exactly the kind of effect that needs the inbox
	})
	fmt.Println(res, err)
}

// Cleanup forgets ids older than the retention; run it now and then.
func ExampleInbox_Cleanup() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	pool, err := pgxpool.New(ctx, "postgres://app@127.0.0.1:5432/notifications")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	ib, err := inbox.New(pool, inbox.Options{Retention: 30 * 24 * time.Hour})
	if err != nil {
		log.Fatal(err)
	}

	tick := time.NewTicker(time.Hour)
	defer tick.Stop()
	for {
		n, err := ib.Cleanup(ctx)
		if err != nil {
			log.Printf("inbox cleanup: %v", err)
		} else if n > 0 {
			log.Printf("inbox cleanup: forgot %d message ids", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// A webhook endpoint: 200 for processed and duplicate messages, 500 when
// the effect failed, so the sender retries.
func ExampleHTTPHandler() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@127.0.0.1:5432/notifications")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	ib, err := inbox.New(pool, inbox.Options{Table: "public.webhook_inbox"})
	if err != nil {
		log.Fatal(err)
	}

	mux := http.NewServeMux()
	mux.Handle("POST /hooks/documents", inbox.HTTPHandler(ib, func(ctx context.Context, tx pgx.Tx, d inbox.Delivery) error {
		_, err := tx.Exec(ctx, `INSERT INTO document_events (message_id, body) VALUES ($1, $2)`, d.ID, d.Body)
		return err
	}, inbox.HTTPOptions{
		IDHeader: "X-Message-Id",
		OnError: func(r *http.Request, msgID string, err error) {
			log.Printf("webhook %s message %q: %v", r.URL.Path, msgID, err)
		},
	}))
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", mux))
}
