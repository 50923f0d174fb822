package webhook

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walpost/walpost/inbox"
	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/sinktest"
)

// inboxReceiver is inbox.HTTPHandler over a real Postgres inbox, with
// signatures required, recording each effect (message id and body) in a
// table of its own in the effect's transaction. Requests pass through
// tamper first, when set.
type inboxReceiver struct {
	srv     *httptest.Server
	obs     *pgx.Conn
	effects string // table: id, body

	mu       sync.Mutex
	tamper   func(body []byte) []byte
	rejected []error // errors of requests answered 4xx or 5xx
}

func newInboxReceiver(t *testing.T, secret string) *inboxReceiver {
	t.Helper()
	url := pgtest.URL(t)
	ir := &inboxReceiver{effects: pgtest.Name(t, "effects"), obs: pgtest.Connect(t, url)}
	pgtest.Exec(t, url, `CREATE TABLE `+ir.effects+` (seq serial, id text NOT NULL, body bytea NOT NULL)`)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	ib, err := inbox.New(pool, inbox.Options{Table: "public." + pgtest.Name(t, "inbox")})
	if err != nil {
		t.Fatal(err)
	}
	if err := ib.EnsureTable(context.Background()); err != nil {
		t.Fatal(err)
	}
	h := inbox.HTTPHandler(ib, func(ctx context.Context, tx pgx.Tx, d inbox.Delivery) error {
		_, err := tx.Exec(ctx, `INSERT INTO `+ir.effects+` (id, body) VALUES ($1, $2)`, d.ID, d.Body)
		return err
	}, inbox.HTTPOptions{
		SigningSecrets: [][]byte{[]byte("old secret"), []byte(secret)},
		MaxBodyBytes:   8 << 20,
		OnError: func(r *http.Request, msgID string, err error) {
			ir.mu.Lock()
			defer ir.mu.Unlock()
			ir.rejected = append(ir.rejected, err)
		},
	})
	ir.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ir.mu.Lock()
		tamper := ir.tamper
		ir.mu.Unlock()
		if tamper != nil {
			b, _ := io.ReadAll(r.Body)
			b = tamper(b)
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(ir.srv.Close)
	return ir
}

// stored returns the effects committed, in commit order.
func (ir *inboxReceiver) stored(t *testing.T) []*message.Message {
	t.Helper()
	rows, err := ir.obs.Query(context.Background(), `SELECT id, body FROM `+ir.effects+` ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	var msgs []*message.Message
	for rows.Next() {
		m := &message.Message{PayloadJSON: true}
		if err := rows.Scan(&m.ID, &m.Payload); err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, m)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return msgs
}

func (ir *inboxReceiver) lastRejection() error {
	ir.mu.Lock()
	defer ir.mu.Unlock()
	if len(ir.rejected) == 0 {
		return nil
	}
	return ir.rejected[len(ir.rejected)-1]
}

// TestIntegrationSignedRequestsReachTheInboxOnce: the sink's signed
// requests pass inbox.HTTPHandler's verification and each message's
// effect commits once, in order, even when a batch is sent twice; a body
// altered on the way, a stale signature and a wrong secret are answered
// 401, commit nothing, and stop the relay (Permanent) rather than park
// messages.
func TestIntegrationSignedRequestsReachTheInboxOnce(t *testing.T) {
	const secret = "s3cret signing key"
	ir := newInboxReceiver(t, secret)
	s := newSink(t, ir.srv.URL, "secret: '"+secret+"'")
	g := sinktest.NewGen(81)
	msgs := g.Interleave(40, sinktest.Keys(3)...)
	for range 2 { // the second time, every one is a duplicate
		if err := s.Publish(sinktest.Context(t, 30*time.Second), msgs); err != nil {
			t.Fatal(err)
		}
	}
	got := ir.stored(t)
	if !sinktest.CheckDelivered(t, sinktest.Features{GlobalOrder: true}, onlyIDAndPayload(msgs), got, nil) {
		t.Fatal("the inbox did not commit each message once, in order")
	}

	more := g.Interleave(3, "agg-x")
	for _, c := range []struct {
		name    string
		setup   func()
		wantErr error
	}{
		{"tampered body", func() {
			ir.tamper = func(b []byte) []byte { return append(bytes.Clone(b), ' ') }
		}, inbox.ErrBadSignature},
		{"stale timestamp", func() {
			s.now = func() time.Time { return time.Now().Add(-10 * time.Minute) }
		}, inbox.ErrStaleSignature},
		{"timestamp from the future", func() {
			s.now = func() time.Time { return time.Now().Add(10 * time.Minute) }
		}, inbox.ErrStaleSignature},
		{"wrong secret", func() { s.secret = []byte("not the secret") }, inbox.ErrBadSignature},
		{"no signature", func() { s.secret = nil }, inbox.ErrNoSignature},
	} {
		ir.mu.Lock()
		ir.tamper = nil
		ir.mu.Unlock()
		s.now, s.secret = time.Now, []byte(secret)
		ir.mu.Lock()
		c.setup()
		ir.mu.Unlock()
		err := s.Publish(sinktest.Context(t, 10*time.Second), more)
		if err == nil || !publish.IsPermanent(err) || publish.IsRejected(err) {
			t.Errorf("%s: Publish returned %v, want a Permanent error (401) that is not Rejected", c.name, err)
		}
		if !errors.Is(ir.lastRejection(), c.wantErr) {
			t.Errorf("%s: the handler rejected with %v, want %v", c.name, ir.lastRejection(), c.wantErr)
		}
		if n := len(ir.stored(t)); n != len(msgs) {
			t.Errorf("%s: %d effects committed, want still %d", c.name, n, len(msgs))
		}
	}
	s.now, s.secret = time.Now, []byte(secret)
	if err := s.Publish(sinktest.Context(t, 10*time.Second), more); err != nil {
		t.Fatalf("with the right secret again: %v", err)
	}
	sinktest.CheckDelivered(t, sinktest.Features{GlobalOrder: true}, onlyIDAndPayload(append(msgs, more...)), ir.stored(t), nil)
}

// onlyIDAndPayload copies msgs with only what the inbox effect stores.
func onlyIDAndPayload(msgs []*message.Message) []*message.Message {
	out := make([]*message.Message, len(msgs))
	for i, m := range msgs {
		out[i] = &message.Message{ID: m.ID, Key: m.ID, HasKey: true, Payload: m.Payload, PayloadJSON: true}
	}
	return out
}

// TestIntegrationReplayUnderAFreshIDIsRefused: a signed request captured
// on the way and sent again within the tolerance under a fresh message id
// (X-Message-Id, Idempotency-Key) does not verify, since the signature
// covers the idempotency key: inbox.HTTPHandler answers 401 and runs no
// effect, while the request as signed is processed once. In mode batch
// the signature verifies with the batch's Idempotency-Key and no other.
func TestIntegrationReplayUnderAFreshIDIsRefused(t *testing.T) {
	const secret = "replay secret"
	ir := newInboxReceiver(t, secret)
	tap := newReceiver(t)
	s := newSink(t, tap.srv.URL, "secret: '"+secret+"'")
	m := sinktest.NewGen(82).Interleave(1, "a")
	if err := s.Publish(sinktest.Context(t, 10*time.Second), m); err != nil {
		t.Fatal(err)
	}
	captured := tap.requests()[0]
	post := func(id string) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, ir.srv.URL, bytes.NewReader(captured.body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header = captured.header.Clone()
		req.Header.Set(headerID, id)
		req.Header.Set(headerIdempotencyKey, id)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(m[0].ID); code != http.StatusOK {
		t.Fatalf("the request as signed: %d, want 200", code)
	}
	if code := post(m[0].ID + "-replayed"); code != http.StatusUnauthorized {
		t.Errorf("replayed under a fresh id: %d, want 401", code)
	}
	if !errors.Is(ir.lastRejection(), inbox.ErrBadSignature) {
		t.Errorf("the handler rejected with %v, want inbox.ErrBadSignature", ir.lastRejection())
	}
	if n := len(ir.stored(t)); n != 1 {
		t.Errorf("%d effects committed, want 1 (the replay under a fresh id ran the effect again)", n)
	}

	tb := newReceiver(t)
	sb := newSink(t, tb.srv.URL, "secret: '"+secret+"'", "mode: batch")
	if err := sb.Publish(sinktest.Context(t, 10*time.Second), sinktest.NewGen(83).Interleave(3, "a")); err != nil {
		t.Fatal(err)
	}
	r := tb.requests()[0]
	key, sig := r.header.Get(headerIdempotencyKey), r.header.Get(inbox.SignatureHeader)
	if err := inbox.VerifySignature(sig, key, r.body, time.Now(), 0, []byte(secret)); err != nil {
		t.Errorf("batch request: %v, want it to verify with its Idempotency-Key", err)
	}
	other := "0" + key[1:]
	if key[0] == '0' {
		other = "1" + key[1:]
	}
	if err := inbox.VerifySignature(sig, other, r.body, time.Now(), 0, []byte(secret)); !errors.Is(err, inbox.ErrBadSignature) {
		t.Errorf("batch request with another key: %v, want inbox.ErrBadSignature", err)
	}
}

// TestIntegrationBatchToHTTPHandlerStopsTheRelay: inbox.HTTPHandler
// finds no message id in a request of mode batch (a JSON array) and
// answers 428; the sink takes that for a setup mismatch (Permanent, with
// a hint), not a refusal of the messages (Rejected), so on_refused:
// dead_letter does not park every message. Nothing is committed.
func TestIntegrationBatchToHTTPHandlerStopsTheRelay(t *testing.T) {
	const secret = "batch secret"
	ir := newInboxReceiver(t, secret)
	s := newSink(t, ir.srv.URL, "secret: '"+secret+"'", "mode: batch")
	msgs := sinktest.NewGen(84).Interleave(3, "a")
	for _, call := range [][]*message.Message{msgs, msgs[:1]} { // the second as the runner's one-at-a-time search would
		err := s.Publish(sinktest.Context(t, 10*time.Second), call)
		if !publish.IsPermanent(err) || publish.IsRejected(err) || !strings.Contains(err.Error(), "mode: message") {
			t.Fatalf("Publish of %d = %v, want a Permanent error that is not Rejected, with a hint", len(call), err)
		}
	}
	if n := len(ir.stored(t)); n != 0 {
		t.Errorf("%d effects committed, want 0", n)
	}
}
