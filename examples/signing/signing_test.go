package signing_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walpost/walpost/examples/signing"
	"github.com/walpost/walpost/inbox"
	"github.com/walpost/walpost/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// newDatabase creates a database of the test's own, dropped at the end, and
// returns its URL: the example uses fixed table names.
func newDatabase(t *testing.T) string {
	t.Helper()
	base := pgtest.URL(t)
	name := pgtest.Name(t, "signing")
	pgtest.Exec(t, base, `CREATE DATABASE `+pgx.Identifier{name}.Sanitize())
	t.Cleanup(func() { pgtest.Exec(t, base, `DROP DATABASE `+pgx.Identifier{name}.Sanitize()+` WITH (FORCE)`) })
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

// TestIntegrationSignedDocumentNotifiesOnceWhenTheMessageIsRedelivered runs
// the producer's transaction, turns its outbox row into the line the
// relay's stdout sink would print, and feeds it to the consumer twice, as
// at-least-once delivery may.
func TestIntegrationSignedDocumentNotifiesOnceWhenTheMessageIsRedelivered(t *testing.T) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, newDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	ib, err := inbox.New(pool, inbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := signing.SetupProducer(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if err := signing.SetupConsumer(ctx, pool, ib); err != nil {
		t.Fatal(err)
	}

	msgID, err := signing.Sign(ctx, pool, "doc-42", "ada")
	if err != nil {
		t.Fatal(err)
	}

	// What the relay would print for the outbox row.
	l := signing.Line{LSN: "0/16B3748", CommitLSN: "0/16B37A0"}
	var payload []byte
	if err := pool.QueryRow(ctx, `SELECT id::text, type, key, payload::text FROM public.outbox`).
		Scan(&l.ID, &l.Type, &l.Key, &payload); err != nil {
		t.Fatal(err)
	}
	l.Payload = payload
	if l.ID != msgID || l.Type != signing.TypeDocumentSigned || l.Key != "doc-42" {
		t.Fatalf("outbox row %+v does not match the signature", l)
	}
	line, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	other := `{"id":"0190b6a4-7a4c-7cc2-9f1e-6f1d3c1f7a10","type":"document.archived","payload":{},"lsn":"0/16B3800","commit_lsn":"0/16B3900"}`
	stdin := string(line) + "\n" + other + "\n" + string(line) + "\n"

	var out bytes.Buffer
	if err := signing.Consume(ctx, ib, strings.NewReader(stdin), &out); err != nil {
		t.Fatal(err)
	}
	want := msgID + " document.signed: processed\n" +
		"0190b6a4-7a4c-7cc2-9f1e-6f1d3c1f7a10 document.archived: ignored\n" +
		msgID + " document.signed: duplicate\n"
	if out.String() != want {
		t.Fatalf("consumer output\n%s\nwant\n%s", out.String(), want)
	}

	rows, err := pool.Query(ctx, `SELECT text FROM notifications`)
	if err != nil {
		t.Fatal(err)
	}
	texts, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(texts) != 1 || texts[0] != "ada signed document doc-42" {
		t.Fatalf("notifications %q, want exactly one for doc-42", texts)
	}
}

func TestIntegrationConsumerStopsAtABadLineWithoutRecordingIt(t *testing.T) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, newDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	ib, err := inbox.New(pool, inbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := signing.SetupConsumer(ctx, pool, ib); err != nil {
		t.Fatal(err)
	}
	bad := `{"id":"m1","type":"document.signed","payload":{"signed_by":"ada"},"lsn":"0/1","commit_lsn":"0/2"}` + "\n"
	err = signing.Consume(ctx, ib, strings.NewReader(bad), &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("error = %v, want one naming line 1", err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM public.inbox`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("inbox rows after a failed effect: %d (%v), want 0", n, err)
	}
}
