package webhook

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/sinktest"
)

// failFor makes rc answer status (with extra headers) to the first n
// requests, then 200.
func failFor(rc *receiver, n int, status int, header map[string]string) *atomic.Int32 {
	var seen atomic.Int32
	rc.setAnswer(func(w http.ResponseWriter, r request) bool {
		if seen.Add(1) > int32(n) {
			return false
		}
		for k, v := range header {
			w.Header().Set(k, v)
		}
		http.Error(w, "try later", status)
		return true
	})
	return &seen
}

// TestRetryableAnswersAreTransient: 5xx, 408, 425 and 429 are errors the
// relay retries (not Permanent), reporting the messages answered 2xx
// before the failed request durable; the retry delivers the rest, in
// order.
func TestRetryableAnswersAreTransient(t *testing.T) {
	for _, mode := range []string{"message", "batch"} {
		for _, status := range []int{500, 502, 503, 504, 408, 425, 429} {
			t.Run(fmt.Sprintf("%s/%d", mode, status), func(t *testing.T) {
				rc := newReceiver(t)
				s := newSink(t, rc.srv.URL, "mode: "+mode, "batch_size: 2")
				g := sinktest.NewGen(11)
				msgs := g.Interleave(5, "a")
				// The second request fails: one message, or two in batch mode.
				var seen atomic.Int32
				rc.setAnswer(func(w http.ResponseWriter, r request) bool {
					if seen.Add(1) != 2 {
						return false
					}
					http.Error(w, "busy", status)
					return true
				})
				err := s.Publish(sinktest.Context(t, 10*time.Second), msgs)
				if err == nil || publish.IsPermanent(err) {
					t.Fatalf("got %v, want a transient error", err)
				}
				if !strings.Contains(err.Error(), fmt.Sprint(status)) || !strings.Contains(err.Error(), msgs[map[string]int{"message": 1, "batch": 2}[mode]].ID) {
					t.Errorf("error %q does not name the status and the failed request's first message", err)
				}
				k := map[string]int{"message": 1, "batch": 2}[mode]
				requirePartial(t, err, len(msgs), k)
				// The runner sends what was not reported durable.
				if err := sinktest.PublishWithRetry(sinktest.Context(t, 10*time.Second), s, msgs[k:]); err != nil {
					t.Fatal(err)
				}
				var got []*message.Message
				for _, r := range rc.requests() {
					if mode == "batch" {
						got = append(got, batchMessages(t, r)...)
					} else {
						got = append(got, rawMessage(r))
					}
				}
				sinktest.CheckDelivered(t, sinktest.Features{GlobalOrder: true}, msgs, got, nil)
			})
		}
	}
}

// TestRetryAfterIsWaitedOut: a 429 or 503 with Retry-After (seconds or
// an HTTP date) makes Publish wait that long before it returns its
// transient error, at most max_retry_after, and no longer than its
// context; max_retry_after: 0s ignores it.
func TestRetryAfterIsWaitedOut(t *testing.T) {
	for _, c := range []struct {
		name           string
		status         int
		retryAfter     func() string
		settings       string
		ctx            time.Duration
		atLeast, below time.Duration
		wantCtxErr     bool
	}{
		{"seconds", 429, func() string { return "1" }, "max_retry_after: 30s", 10 * time.Second, time.Second, 3 * time.Second, false},
		{"HTTP date", 503, func() string { return time.Now().Add(2 * time.Second).UTC().Format(http.TimeFormat) }, "max_retry_after: 30s", 10 * time.Second, 900 * time.Millisecond, 3 * time.Second, false},
		{"capped", 429, func() string { return "3600" }, "max_retry_after: 300ms", 10 * time.Second, 300 * time.Millisecond, 2 * time.Second, false},
		{"ignored", 429, func() string { return "3600" }, "max_retry_after: 0s", 10 * time.Second, 0, 500 * time.Millisecond, false},
		{"bounded by the context", 503, func() string { return "60" }, "max_retry_after: 1m", 400 * time.Millisecond, 300 * time.Millisecond, 2 * time.Second, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			rc := newReceiver(t)
			s := newSink(t, rc.srv.URL, c.settings)
			rc.setAnswer(func(w http.ResponseWriter, r request) bool {
				w.Header().Set("Retry-After", c.retryAfter())
				http.Error(w, "slow down", c.status)
				return true
			})
			ctx, cancel := context.WithTimeout(context.Background(), c.ctx)
			defer cancel()
			start := time.Now()
			err := s.Publish(ctx, sinktest.NewGen(12).Interleave(1, "a"))
			el := time.Since(start)
			if err == nil || publish.IsPermanent(err) {
				t.Fatalf("got %v, want a transient error", err)
			}
			if el < c.atLeast || el >= c.below {
				t.Errorf("Publish returned after %s, want %s..%s", el, c.atLeast, c.below)
			}
			if got := errors.Is(err, context.DeadlineExceeded); got != c.wantCtxErr {
				t.Errorf("error %v wraps the context's end: %v, want %v", err, got, c.wantCtxErr)
			}
		})
	}
}

// TestRefusalsAreRejectedAndCredentialErrorsPermanent: a 4xx about the
// request's content is Rejected (on_refused can park the message); one
// about the endpoint or credentials, a redirect, is Permanent only.
func TestRefusalsAreRejectedAndCredentialErrorsPermanent(t *testing.T) {
	for _, c := range []struct {
		status   int
		rejected bool
	}{
		{400, true}, {409, true}, {413, true}, {415, true}, {422, true},
		{401, false}, {403, false}, {404, false}, {405, false}, {410, false}, {428, false},
		{301, false}, {302, false}, {307, false}, {308, false},
	} {
		t.Run(fmt.Sprint(c.status), func(t *testing.T) {
			rc := newReceiver(t)
			s := newSink(t, rc.srv.URL)
			msgs := sinktest.NewGen(13).Interleave(3, "a")
			rc.setAnswer(func(w http.ResponseWriter, r request) bool {
				if r.header.Get(headerID) != msgs[1].ID {
					return false
				}
				w.Header().Set("Location", rc.srv.URL+"/elsewhere")
				w.WriteHeader(c.status)
				return true
			})
			err := s.Publish(sinktest.Context(t, 10*time.Second), msgs)
			if !publish.IsPermanent(err) || publish.IsRejected(err) != c.rejected {
				t.Fatalf("got %v (permanent %v, rejected %v), want permanent, rejected %v",
					err, publish.IsPermanent(err), publish.IsRejected(err), c.rejected)
			}
			requirePartial(t, err, 3, 1)
			if !strings.Contains(err.Error(), msgs[1].ID) {
				t.Errorf("error %q does not name the refused message", err)
			}
			if len(rc.requests()) != 1 {
				t.Errorf("%d requests delivered, want 1 (nothing after the refused one, no redirect followed)", len(rc.requests()))
			}
		})
	}
}

// TestRunnerFindsTheRefusedMessageOfABatch: in mode batch a 4xx refuses
// a request of several messages; the relay's runner (on_refused:
// dead_letter) then publishes them one at a time, each in a request of
// its own, and parks exactly the message the receiver refuses, while
// every other message is delivered in order.
func TestRunnerFindsTheRefusedMessageOfABatch(t *testing.T) {
	rc := newReceiver(t)
	s := newSink(t, rc.srv.URL, "mode: batch", "batch_size: 4")
	g := sinktest.NewGen(14)
	msgs := g.Interleave(10, "a", "b")
	bad := msgs[6]
	rc.setAnswer(func(w http.ResponseWriter, r request) bool {
		if !bodyHas(r, bad.ID) {
			return false
		}
		http.Error(w, "unprocessable", http.StatusUnprocessableEntity)
		return true
	})
	in := make(chan []publish.Delivery, 1)
	ds := make([]publish.Delivery, len(msgs))
	for i, m := range msgs {
		ds[i] = publish.Delivery{Msg: m}
	}
	in <- ds
	close(in)
	var acked, parked []*message.Message
	r := publish.NewRunner(s, in, publish.RunnerOptions{
		Log: zerolog.Nop(),
		Ack: func(b []publish.Delivery) {
			for _, d := range b {
				acked = append(acked, d.Msg)
			}
		},
		Refused: func(_ context.Context, d publish.Delivery, err error) error {
			parked = append(parked, d.Msg)
			return nil
		},
	})
	if err := r.Run(sinktest.Context(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	if len(parked) != 1 || parked[0].ID != bad.ID {
		t.Fatalf("parked %v, want only %s", ids(parked), bad.ID)
	}
	want := append(append([]*message.Message{}, msgs[:6]...), msgs[7:]...)
	if fmt.Sprint(ids(acked)) != fmt.Sprint(ids(want)) {
		t.Errorf("acked %v, want %v", ids(acked), ids(want))
	}
	var got []*message.Message
	for _, req := range rc.requests() {
		got = append(got, batchMessages(t, req)...)
	}
	sinktest.CheckDelivered(t, sinktest.Features{GlobalOrder: true, NullKey: true, LSN: true}, want, got, nil)
}

func ids(msgs []*message.Message) []string {
	var out []string
	for _, m := range msgs {
		out = append(out, m.ID)
	}
	return out
}

// TestTimeoutIsRetried: an endpoint that does not answer within timeout
// is a transient error naming the timeout, and Publish returns soon
// after it; once the endpoint answers, the retry delivers.
func TestTimeoutIsRetried(t *testing.T) {
	rc := newReceiver(t)
	s := newSink(t, rc.srv.URL, "timeout: 300ms")
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	rc.setAnswer(func(w http.ResponseWriter, r request) bool {
		select {
		case <-release:
			return false
		default:
		}
		// Not released yet: keep the client waiting, record nothing.
		select {
		case <-release:
		case <-time.After(5 * time.Second):
		}
		return true
	})
	msgs := sinktest.NewGen(15).Interleave(2, "a")
	start := time.Now()
	err := s.Publish(sinktest.Context(t, 10*time.Second), msgs)
	if el := time.Since(start); el < 300*time.Millisecond || el > 2*time.Second {
		t.Errorf("Publish returned after %s with timeout 300ms", el)
	}
	if err == nil || publish.IsPermanent(err) || !strings.Contains(err.Error(), "no answer within timeout 300ms") {
		t.Fatalf("got %v, want a transient error naming the timeout", err)
	}
	requirePartial(t, err, 2, 0)
	once.Do(func() { close(release) })
	if err := sinktest.PublishWithRetry(sinktest.Context(t, 10*time.Second), s, msgs); err != nil {
		t.Fatal(err)
	}
	if n := len(rc.requests()); n != 2 {
		t.Errorf("%d requests recorded, want 2", n)
	}
}

// TestConnectionRefusedIsTransient: nothing listening is an outage, not
// a configuration error.
func TestConnectionRefusedIsTransient(t *testing.T) {
	rc := newReceiver(t)
	u := rc.srv.URL
	rc.srv.Close()
	s := newSink(t, u)
	err := s.Publish(sinktest.Context(t, 10*time.Second), sinktest.NewGen(16).Interleave(1, "a"))
	if err == nil || publish.IsPermanent(err) {
		t.Fatalf("got %v, want a transient error", err)
	}
}

// TestRequestsCarryIdentityHeadersAndBodies checks the requests of both
// modes header by header: mode message carries the payload as its body
// and the id as Idempotency-Key and X-Message-Id, the type and key, the
// headers column (less what the sink or headers: sets) and headers:;
// mode batch carries a JSON array of the file sink's objects, the count,
// and the digest of the ids as Idempotency-Key.
func TestRequestsCarryIdentityHeadersAndBodies(t *testing.T) {
	rc := newReceiver(t)
	s := newSink(t, rc.srv.URL, "headers: {X-Static: static value, User-Agent: relay-1}")
	g := sinktest.NewGen(17)
	m := g.Message("order-1")
	m.Headers["Content-Type"] = "text/evil"
	m.Headers["x-static"] = "overridden?"
	m.Headers["idempotency-key"] = "spoofed"
	m.Headers["x-tenant"] = "acme"
	null := g.NullKeyMessage()
	if err := s.Publish(sinktest.Context(t, 10*time.Second), []*message.Message{m, null}); err != nil {
		t.Fatal(err)
	}
	reqs := rc.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	h := reqs[0].header
	for k, want := range map[string]string{
		"Content-Type": "application/json", "Idempotency-Key": m.ID, "X-Message-Id": m.ID,
		"X-Message-Type": m.Type, "X-Message-Key": "order-1", "X-Static": "static value",
		"User-Agent": "relay-1", "Traceparent": m.Headers["traceparent"], "X-Tenant": "acme",
	} {
		if got := h.Values(k); len(got) != 1 || got[0] != want {
			t.Errorf("header %s = %q, want exactly %q", k, got, want)
		}
	}
	if string(reqs[0].body) != string(m.Payload) {
		t.Errorf("body %q, want the payload %q", reqs[0].body, m.Payload)
	}
	if _, ok := reqs[1].header[headerKey]; ok {
		t.Errorf("a NULL key was sent as %s: %q", headerKey, reqs[1].header.Get(headerKey))
	}

	rb := newReceiver(t)
	sb := newSink(t, rb.srv.URL, "mode: batch")
	batch := g.Interleave(5, "a", "b")
	if err := sb.Publish(sinktest.Context(t, 10*time.Second), batch); err != nil {
		t.Fatal(err)
	}
	reqs = rb.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d batch requests, want 1", len(reqs))
	}
	d := sha256.New()
	for _, m := range batch {
		d.Write([]byte(m.ID + "\n"))
	}
	for k, want := range map[string]string{
		"Content-Type": "application/json", "X-Message-Count": "5", "Idempotency-Key": hex.EncodeToString(d.Sum(nil)),
	} {
		if got := reqs[0].header.Get(k); got != want {
			t.Errorf("batch header %s = %q, want %q", k, got, want)
		}
	}
	if v := reqs[0].header.Get(headerID); v != "" {
		t.Errorf("batch request carries %s %q: inbox.HTTPHandler would take the batch for one message", headerID, v)
	}
	sinktest.CheckDelivered(t, sinktest.Features{GlobalOrder: true, NullKey: true, LSN: true}, batch, batchMessages(t, reqs[0]), nil)
}

// TestBatchesAreCutBySizeAndBytes: mode batch puts at most batch_size
// messages and batch_bytes of body in a request, except a message larger
// than batch_bytes, which goes alone.
func TestBatchesAreCutBySizeAndBytes(t *testing.T) {
	rc := newReceiver(t)
	s := newSink(t, rc.srv.URL, "mode: batch", "batch_size: 3", "batch_bytes: 2048")
	g := sinktest.NewGen(18)
	var msgs []*message.Message
	for _, size := range []int{200, 200, 200, 200, 900, 900, 5000, 200} {
		msgs = append(msgs, g.SizedMessage("a", size))
	}
	if err := s.Publish(sinktest.Context(t, 10*time.Second), msgs); err != nil {
		t.Fatal(err)
	}
	var counts []int
	var got []*message.Message
	for _, r := range rc.requests() {
		b := batchMessages(t, r)
		counts = append(counts, len(b))
		got = append(got, b...)
		if len(r.body) > 2048 && len(b) > 1 {
			t.Errorf("a request of %d messages has %d bytes, over batch_bytes", len(b), len(r.body))
		}
	}
	if fmt.Sprint(counts) != "[3 2 1 1 1]" {
		t.Errorf("requests of %v messages, want [3 2 1 1 1]", counts)
	}
	sinktest.CheckDelivered(t, sinktest.Features{GlobalOrder: true, LSN: true}, msgs, got, nil)
}

// TestUnsendableHeaderEntryIsRejected: an entry of the headers column
// that cannot be an HTTP header refuses its message, naming it and the
// entry, after the messages before it were delivered.
func TestUnsendableHeaderEntryIsRejected(t *testing.T) {
	rc := newReceiver(t)
	s := newSink(t, rc.srv.URL)
	g := sinktest.NewGen(19)
	msgs := g.Interleave(3, "a")
	msgs[1].Headers["bad name"] = "x"
	msgs[2].Headers["x-line"] = "one\r\ntwo"
	err := s.Publish(sinktest.Context(t, 10*time.Second), msgs)
	if !publish.IsRejected(err) || !strings.Contains(err.Error(), msgs[1].ID) || !strings.Contains(err.Error(), `"bad name"`) {
		t.Fatalf("got %v, want a Rejected error naming message %s and the entry", err, msgs[1].ID)
	}
	requirePartial(t, err, 3, 1)
	err = s.Publish(sinktest.Context(t, 10*time.Second), msgs[2:])
	if !publish.IsRejected(err) || strings.Contains(err.Error(), "two") {
		t.Fatalf("got %v, want a Rejected error without the value", err)
	}
}

// TestUnsendableIDOrTypeIsRejected: an id or (format raw) a type holding
// a control character cannot be an HTTP header; net/http would refuse the
// request, which is no network error to retry: the message is refused
// (Rejected, named), after the messages before it were delivered, and
// nothing of it is sent.
func TestUnsendableIDOrTypeIsRejected(t *testing.T) {
	for _, c := range []struct {
		name, format string
		spoil        func(m *message.Message)
		want         string
	}{
		{"type", "raw", func(m *message.Message) { m.Type = "order.created\r\nX-Evil: 1" }, "type"},
		{"id", "raw", func(m *message.Message) { m.ID += "\nX-Evil: 1" }, "id"},
		{"id with cloudevents", "cloudevents", func(m *message.Message) { m.ID += "\x7f" }, "id"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rc := newReceiver(t)
			s := newSink(t, rc.srv.URL, "format: "+c.format)
			msgs := sinktest.NewGen(20).Interleave(3, "a")
			id := msgs[1].ID
			c.spoil(msgs[1])
			err := s.Publish(sinktest.Context(t, 10*time.Second), msgs)
			if !publish.IsRejected(err) || !strings.Contains(err.Error(), id) ||
				!strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want a Rejected error naming the message and its %s", err, c.want)
			}
			requirePartial(t, err, 3, 1)
			if n := len(rc.requests()); n != 1 {
				t.Errorf("%d requests delivered, want 1 (the one before the refused message)", n)
			}
		})
	}
}

// TestOneRequestAtATime: concurrent Publish calls still reach the
// endpoint one request at a time.
func TestOneRequestAtATime(t *testing.T) {
	rc := newReceiver(t)
	s := newSink(t, rc.srv.URL)
	rc.setAnswer(func(w http.ResponseWriter, r request) bool {
		time.Sleep(time.Millisecond)
		return false
	})
	g := sinktest.NewGen(20)
	var batches [][]*message.Message
	for range 4 {
		batches = append(batches, g.Interleave(10, "a"))
	}
	var wg sync.WaitGroup
	for _, b := range batches {
		wg.Go(func() {
			if err := s.Publish(sinktest.Context(t, 10*time.Second), b); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.maxIn != 1 || len(rc.reqs) != 40 {
		t.Errorf("%d requests, at most %d at once; want 40, one at a time", len(rc.reqs), rc.maxIn)
	}
}

// TestTLS: https with the server's CA in tls.ca_file delivers; without
// it the certificate does not verify, which is Permanent with a hint;
// insecure_skip_verify delivers; plain http to the TLS port fails.
func TestTLS(t *testing.T) {
	rc := &receiver{}
	srv := httptest.NewUnstartedServer(rc)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	msgs := sinktest.NewGen(21).Interleave(1, "a")

	if err := newSink(t, srv.URL, "tls: {ca_file: "+ca+"}").Publish(sinktest.Context(t, 10*time.Second), msgs); err != nil {
		t.Errorf("with tls.ca_file: %v", err)
	}
	err := newSink(t, srv.URL).Publish(sinktest.Context(t, 10*time.Second), msgs)
	if !publish.IsPermanent(err) || !strings.Contains(err.Error(), "tls.ca_file") {
		t.Errorf("without tls.ca_file: %v, want a Permanent error pointing at tls.ca_file", err)
	}
	if err := newSink(t, srv.URL, "tls: {insecure_skip_verify: true}").Publish(sinktest.Context(t, 10*time.Second), msgs); err != nil {
		t.Errorf("with insecure_skip_verify: %v", err)
	}
	err = newSink(t, strings.Replace(srv.URL, "https:", "http:", 1)).Publish(sinktest.Context(t, 10*time.Second), msgs)
	if err == nil {
		t.Errorf("plain http to a TLS port succeeded")
	}
	if n := len(rc.requests()); n != 2 {
		t.Errorf("%d requests delivered, want 2", n)
	}
}
