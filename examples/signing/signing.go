// Package signing is a small producer/consumer pair built on walpost's
// outbox and inbox packages: when a document is signed, the producer
// records the signature and a "document.signed" message in one
// transaction; the consumer creates a notification exactly once per
// message, however often the message arrives.
//
// The programs in producer/ and consumer/ wrap these functions; README.md
// shows how to run them with the relay in between. Both sides use one
// database here for brevity; in a real system each service has its own.
// The functions are safe for concurrent use (the pool is).
package signing

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walpost/walpost/inbox"
	"github.com/walpost/walpost/outbox"
)

// TypeDocumentSigned is the message type the producer writes.
const TypeDocumentSigned = "document.signed"

// DocumentSigned is the payload of a document.signed message.
type DocumentSigned struct {
	DocumentID string    `json:"document_id"`
	SignedBy   string    `json:"signed_by"`
	SignedAt   time.Time `json:"signed_at"`
}

// SetupProducer creates the producer's tables if missing: documents and
// public.outbox. (The relay's "cdc init" also creates the outbox table.)
func SetupProducer(ctx context.Context, pool *pgxpool.Pool) error {
	for _, stmt := range []string{
		`CREATE TABLE IF NOT EXISTS documents (
			id        text PRIMARY KEY,
			title     text NOT NULL DEFAULT '',
			signed_by text,
			signed_at timestamptz)`,
		outbox.DDL(outbox.DefaultTable),
	} {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("signing: creating producer tables: %w", err)
		}
	}
	return nil
}

// Sign records that by signed document docID and, in the same
// transaction, enqueues a document.signed message keyed by the document, so
// that the signature and the message commit together or not at all. It
// returns the message id.
func Sign(ctx context.Context, pool *pgxpool.Pool, docID, by string) (msgID string, err error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return "", fmt.Errorf("signing: document %s: %w", docID, err)
	}
	defer tx.Rollback(ctx) // no-op after Commit

	var signedAt time.Time
	err = tx.QueryRow(ctx, `
		INSERT INTO documents (id, signed_by, signed_at) VALUES ($1, $2, now())
		ON CONFLICT (id) DO UPDATE SET signed_by = excluded.signed_by, signed_at = excluded.signed_at
		RETURNING signed_at`, docID, by).Scan(&signedAt)
	if err != nil {
		return "", fmt.Errorf("signing: document %s: recording the signature: %w", docID, err)
	}
	msgID = outbox.NewID()
	err = outbox.Enqueue(ctx, tx, outbox.Message{
		ID:      msgID,
		Type:    TypeDocumentSigned,
		Key:     docID, // all messages about one document keep their order
		Payload: DocumentSigned{DocumentID: docID, SignedBy: by, SignedAt: signedAt.UTC()},
	})
	if err != nil {
		return "", fmt.Errorf("signing: document %s: %w", docID, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return "", fmt.Errorf("signing: document %s: commit: %w", docID, err)
	}
	return msgID, nil
}

// Line is one line of the relay's stdout and file sinks:
//
//	{"id":"…","type":"…","key":"…","payload":<json>,"headers":{…},"lsn":"0/16B3748","commit_lsn":"0/16B37A0"}
//
// key is null when the outbox key is NULL. A payload that is not JSON (a
// bytea column) arrives as a base64 string with "payload_encoding":"base64".
type Line struct {
	ID              string            `json:"id"`
	Type            string            `json:"type"`
	Key             string            `json:"key"`
	Payload         json.RawMessage   `json:"payload"`
	PayloadEncoding string            `json:"payload_encoding,omitempty"`
	Headers         map[string]string `json:"headers"`
	LSN             string            `json:"lsn"`
	CommitLSN       string            `json:"commit_lsn"`
}

// SetupConsumer creates the consumer's tables if missing: notifications
// and the inbox table of ib.
func SetupConsumer(ctx context.Context, pool *pgxpool.Pool, ib *inbox.Inbox) error {
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS notifications (
		id          bigserial PRIMARY KEY,
		document_id text NOT NULL,
		text        text NOT NULL,
		created_at  timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("signing: creating notifications: %w", err)
	}
	return ib.EnsureTable(ctx)
}

// Consume reads messages as JSON lines (the relay's stdout sink format)
// from r and, for each document.signed message, creates a notification
// through the inbox, so a copy of a message creates nothing. It reports
// each message on out ("<id> <type>: processed|duplicate|ignored") and
// returns at the end of r, or at the first line it cannot process: with a
// broker, that message would be left unacknowledged for redelivery.
func Consume(ctx context.Context, ib *inbox.Inbox, r io.Reader, out io.Writer) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for n := 1; sc.Scan(); n++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var l Line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return fmt.Errorf("signing: line %d: %w", n, err)
		}
		if l.Type != TypeDocumentSigned {
			fmt.Fprintf(out, "%s %s: ignored\n", l.ID, l.Type)
			continue
		}
		res, err := ib.Process(ctx, l.ID, func(ctx context.Context, tx pgx.Tx) error {
			var ev DocumentSigned
			if err := json.Unmarshal(l.Payload, &ev); err != nil {
				return fmt.Errorf("decoding payload: %w", err)
			}
			if ev.DocumentID == "" {
				return errors.New("payload has no document_id")
			}
			_, err := tx.Exec(ctx, `INSERT INTO notifications (document_id, text) VALUES ($1, $2)`,
				ev.DocumentID, fmt.Sprintf("%s signed document %s", ev.SignedBy, ev.DocumentID))
			return err
		})
		if err != nil {
			return fmt.Errorf("signing: line %d: %w", n, err)
		}
		fmt.Fprintf(out, "%s %s: %s\n", l.ID, l.Type, res)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("signing: reading messages: %w", err)
	}
	return nil
}
