package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// httpCase is one request to the handler and the answer it must get.
type httpCase struct {
	name       string
	id, body   string // id "" sends no id header
	wantStatus int
	wantBody   string // prefix of the response body
	wantEffect int    // effects committed after the request
}

// checkHTTPHandler sends cases, in order, to HTTPHandler over p, whose
// effect increments the fixture's counter and fails when the body
// contains "fail".
func checkHTTPHandler[Tx any](t *testing.T, f *fixture, p Processor[Tx], exec func(ctx context.Context, tx Tx, sql string) error) {
	var mu sync.Mutex
	var reported []int
	h := HTTPHandler(p, func(ctx context.Context, tx Tx, d Delivery) error {
		if d.ID == "" || d.Request == nil {
			t.Errorf("effect got delivery %+v", d)
		}
		if err := exec(ctx, tx, `UPDATE `+f.counter+` SET n = n + 1`); err != nil {
			return err
		}
		if strings.Contains(string(d.Body), "fail") {
			return errors.New("effect failed")
		}
		return nil
	}, HTTPOptions{
		MaxBodyBytes: 64,
		OnError: func(r *http.Request, msgID string, err error) {
			mu.Lock()
			defer mu.Unlock()
			reported = append(reported, len(msgID))
		},
	})
	srv := httptest.NewServer(h)
	defer srv.Close()

	for _, c := range []httpCase{
		{"new message", "m1", `{"n":1}`, 200, "processed", 1},
		{"redelivery", "m1", `{"n":1}`, 200, "duplicate", 1},
		{"id from the body", "", `{"id":"m2","type":"t","payload":{}}`, 200, "processed", 2},
		{"body id redelivered", "", `{"id":"m2"}`, 200, "duplicate", 2},
		{"effect fails", "m3", `fail`, 500, "Internal Server Error", 2},
		{"sender retries", "m3", `ok`, 200, "processed", 3},
		{"no id", "", `not json`, 428, "Precondition Required", 3},
		{"a batch (a JSON array) has no id", "", `[{"id":"a"},{"id":"b"}]`, 428, "Precondition Required", 3},
		{"too large", "m4", strings.Repeat("x", 65), 413, "Request Entity Too Large", 3},
	} {
		req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		if c.id != "" {
			req.Header.Set(DefaultIDHeader, c.id)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.wantStatus || !strings.HasPrefix(string(b), c.wantBody) {
			t.Errorf("%s: %d %q, want %d %q", c.name, resp.StatusCode, b, c.wantStatus, c.wantBody)
		}
		if n := f.effects(t); n != c.wantEffect {
			t.Errorf("%s: %d effects committed, want %d", c.name, n, c.wantEffect)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	// The failed effect (id "m3"), then no id twice and too large (no id
	// known).
	if got, want := fmt.Sprint(reported), fmt.Sprint([]int{2, 0, 0, 0}); got != want {
		t.Errorf("OnError saw errors with id lengths %s, want %s", got, want)
	}
}

func TestIntegrationHTTPHandlerAnswers2xxOnlyAfterTheCommit(t *testing.T) {
	t.Run("pgx", func(t *testing.T) {
		f := newFixture(t)
		ib := f.open(t, variants[0], Options{}, 4).(pgxInbox)
		checkHTTPHandler(t, f, ib.Inbox, func(ctx context.Context, tx pgx.Tx, q string) error {
			_, err := tx.Exec(ctx, q)
			return err
		})
	})
	t.Run("database/sql", func(t *testing.T) {
		f := newFixture(t)
		ib := f.open(t, variants[1], Options{}, 4).(sqlInbox)
		checkHTTPHandler(t, f, ib.SQLInbox, func(ctx context.Context, tx *sql.Tx, q string) error {
			_, err := tx.ExecContext(ctx, q)
			return err
		})
	})
}

// TestIntegrationHTTPHandlerVerifiesSignatures: with SigningSecrets the
// handler answers 401, committing nothing, to a request signed with v2
// (as the webhook sink signs) in which anything the receiver acts on was
// changed after signing: the body, the id (header or body), the type, the
// key, a header of the outbox headers column, the content type, the
// timestamp; to a request carrying such a header unsigned, signed with
// another secret, stale, or unsigned; and to a request signed with the
// old scheme v1 only (AcceptSignatureV1Until not set). It processes a
// request signed with any of the secrets once, a replay within the
// tolerance is a duplicate, and the effect sees only the signed headers.
func TestIntegrationHTTPHandlerVerifiesSignatures(t *testing.T) {
	f := newFixture(t)
	ib := f.open(t, variants[0], Options{}, 4).(pgxInbox)
	secret, old := []byte("new secret"), []byte("old secret")
	var mu sync.Mutex
	var rejected []error
	var seen []http.Header
	h := HTTPHandler(ib.Inbox, func(ctx context.Context, tx pgx.Tx, d Delivery) error {
		mu.Lock()
		seen = append(seen, d.Request.Header)
		mu.Unlock()
		_, err := tx.Exec(ctx, `UPDATE `+f.counter+` SET n = n + 1`)
		return err
	}, HTTPOptions{
		SigningSecrets:     [][]byte{secret, old},
		SignatureTolerance: time.Minute,
		OnError: func(r *http.Request, msgID string, err error) {
			mu.Lock()
			defer mu.Unlock()
			rejected = append(rejected, err)
		},
	})
	srv := httptest.NewServer(h)
	defer srv.Close()

	const body = `{"id":"s1","n":1}`
	now := time.Now()
	// signed returns the headers of a request as the webhook sink sends
	// it, signed at at with secret; edit changes them after signing.
	signed := func(secret []byte, at time.Time, edit func(http.Header)) http.Header {
		h := http.Header{}
		h.Set("Content-Type", "application/json")
		h.Set("Idempotency-Key", "s1")
		h.Set(DefaultIDHeader, "s1")
		h.Set("X-Message-Type", "order.created")
		h.Set("X-Message-Key", "order-42")
		h.Set("Traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
		names := make([]string, 0, len(h))
		for k := range h {
			names = append(names, k)
		}
		h.Set(SignatureHeader, SignRequest(secret, at, h, names, []byte(body)))
		if edit != nil {
			edit(h)
		}
		return h
	}
	set := func(k, v string) func(http.Header) { return func(h http.Header) { h.Set(k, v) } }
	for _, c := range []struct {
		name       string
		header     http.Header
		body       string
		wantStatus int
		wantErr    error
		wantEffect int
	}{
		{"unsigned", signed(secret, now, func(h http.Header) { h.Del(SignatureHeader) }), body, 401, ErrNoSignature, 0},
		{"body changed", signed(secret, now, nil), `{"id":"s1","n":2}`, 401, ErrBadSignature, 0},
		{"type changed", signed(secret, now, set("X-Message-Type", "order.refunded")), body, 401, ErrBadSignature, 0},
		{"key changed", signed(secret, now, set("X-Message-Key", "order-43")), body, 401, ErrBadSignature, 0},
		{"key removed", signed(secret, now, func(h http.Header) { h.Del("X-Message-Key") }), body, 401, ErrBadSignature, 0},
		{"headers column entry changed", signed(secret, now, set("Traceparent", "00-00000000000000000000000000000001-00f067aa0ba902b7-01")), body, 401, ErrBadSignature, 0},
		{"headers column entry given twice", signed(secret, now, func(h http.Header) { h.Add("Traceparent", "x") }), body, 401, ErrBadSignature, 0},
		{"content type changed", signed(secret, now, set("Content-Type", "text/plain")), body, 401, ErrBadSignature, 0},
		{"id header changed", signed(secret, now, set(DefaultIDHeader, "s1-replay")), body, 401, ErrBadSignature, 0},
		{"idempotency key changed", signed(secret, now, set("Idempotency-Key", "s1-replay")), body, 401, ErrBadSignature, 0},
		{"message header added unsigned", signed(secret, now, set("X-Message-Tenant", "evil")), body, 401, ErrBadSignature, 0},
		{"id header removed from the signed names", signed(secret, now, func(h http.Header) {
			h.Set(SignatureHeader, strings.Replace(h.Get(SignatureHeader), ";x-message-id", "", 1))
		}), body, 401, ErrBadSignature, 0},
		{"timestamp changed", signed(secret, now, func(h http.Header) {
			h.Set(SignatureHeader, strings.Replace(h.Get(SignatureHeader), fmt.Sprintf("t=%d", now.Unix()), fmt.Sprintf("t=%d", now.Unix()+1), 1))
		}), body, 401, ErrBadSignature, 0},
		{"another secret", signed([]byte("guess"), now, nil), body, 401, ErrBadSignature, 0},
		{"stale", signed(secret, now.Add(-2*time.Minute), nil), body, 401, ErrStaleSignature, 0},
		{"from the future", signed(secret, now.Add(2*time.Minute), nil), body, 401, ErrStaleSignature, 0},
		{"old scheme v1 only", http.Header{DefaultIDHeader: {"s1"}, SignatureHeader: {Sign(secret, now, "s1", []byte(body))}}, body, 401, ErrSignatureV1, 0},
		{"v2 tampered, a valid v1 beside it", signed(secret, now, func(h http.Header) {
			h.Set("X-Message-Type", "order.refunded")
			v1 := Sign(secret, now, "s1", []byte(body))
			h.Set(SignatureHeader, h.Get(SignatureHeader)+v1[strings.IndexByte(v1, ','):])
		}), body, 401, ErrBadSignature, 0},
		{"signed", signed(secret, now, set("X-Forwarded-For", "10.0.0.1")), body, 200, nil, 1},
		{"replayed as it was", signed(secret, now, nil), body, 200, nil, 1},
		{"replayed with the id in the body changed, no id header", signed(secret, now, func(h http.Header) {
			h.Del(DefaultIDHeader)
		}), `{"id":"s2","n":1}`, 401, ErrBadSignature, 1},
		{"redelivered with the old secret", signed(old, now, nil), body, 200, nil, 1},
	} {
		req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header = c.header
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.wantStatus {
			t.Errorf("%s: %d, want %d", c.name, resp.StatusCode, c.wantStatus)
		}
		if c.wantErr != nil {
			mu.Lock()
			last := rejected[len(rejected)-1]
			mu.Unlock()
			if !errors.Is(last, c.wantErr) {
				t.Errorf("%s: OnError got %v, want %v", c.name, last, c.wantErr)
			}
		}
		if n := f.effects(t); n != c.wantEffect {
			t.Errorf("%s: %d effects committed, want %d", c.name, n, c.wantEffect)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) == 0 {
		t.Fatal("the effect never ran")
	}
	if got := seen[0]; got.Get("X-Forwarded-For") != "" || got.Get("X-Message-Type") != "order.created" || got.Get(SignatureHeader) != "" {
		t.Errorf("the effect saw headers %v, want the signed ones only", got)
	}
}

// TestIntegrationHTTPHandlerAcceptsV1OnlyDuringTheTransition: a request
// signed with the old scheme v1 only (the idempotency key and the body) is
// processed while HTTPOptions.AcceptSignatureV1Until is in the future and
// refused with 401 (ErrSignatureV1) once it has passed; a v2 signature
// is verified either way, and its changed type is refused even when a
// valid v1 is beside it.
func TestIntegrationHTTPHandlerAcceptsV1OnlyDuringTheTransition(t *testing.T) {
	f := newFixture(t)
	ib := f.open(t, variants[0], Options{}, 4).(pgxInbox)
	secret := []byte("secret")
	now := time.Now()
	for _, c := range []struct {
		name       string
		until      time.Time
		id, sig    string
		edit       func(http.Header)
		wantStatus int
		wantEffect int
	}{
		{"v1 after the transition", now.Add(-time.Second), "t1", "v1", nil, 401, 0},
		{"v1 with no transition", time.Time{}, "t1", "v1", nil, 401, 0},
		{"v1 for another id during the transition", now.Add(time.Hour), "t1", "v1-other", nil, 401, 0},
		{"v1 during the transition", now.Add(time.Hour), "t1", "v1", nil, 200, 1},
		{"v2 with v1 beside it, type changed, during the transition", now.Add(time.Hour), "t2", "v2+v1", func(h http.Header) { h.Set("X-Message-Type", "order.refunded") }, 401, 1},
		{"v2 with v1 beside it, during the transition", now.Add(time.Hour), "t2", "v2+v1", nil, 200, 2},
		{"v2 after the transition", now.Add(-time.Second), "t3", "v2", nil, 200, 3},
	} {
		var errs []error
		h := HTTPHandler(ib.Inbox, func(ctx context.Context, tx pgx.Tx, d Delivery) error {
			_, err := tx.Exec(ctx, `UPDATE `+f.counter+` SET n = n + 1`)
			return err
		}, HTTPOptions{
			SigningSecrets:         [][]byte{secret},
			AcceptSignatureV1Until: c.until,
			OnError:                func(_ *http.Request, _ string, err error) { errs = append(errs, err) },
		})
		body := []byte(`{"n":1}`)
		req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(string(body)))
		req.Header.Set(DefaultIDHeader, c.id)
		req.Header.Set("X-Message-Type", "order.created")
		v1 := Sign(secret, now, c.id, body)
		switch c.sig {
		case "v1":
			req.Header.Set(SignatureHeader, v1)
		case "v1-other":
			req.Header.Set(SignatureHeader, Sign(secret, now, "t0", body))
		default:
			sig := SignRequest(secret, now, req.Header, []string{DefaultIDHeader, "X-Message-Type"}, body)
			if c.sig == "v2+v1" {
				sig += v1[strings.IndexByte(v1, ','):]
			}
			req.Header.Set(SignatureHeader, sig)
		}
		if c.edit != nil {
			c.edit(req.Header)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != c.wantStatus {
			t.Errorf("%s: %d, want %d (%v)", c.name, w.Code, c.wantStatus, errs)
		}
		if c.wantStatus == 401 && c.sig == "v1" && (len(errs) == 0 || !errors.Is(errs[0], ErrSignatureV1)) {
			t.Errorf("%s: OnError got %v, want ErrSignatureV1", c.name, errs)
		}
		if n := f.effects(t); n != c.wantEffect {
			t.Errorf("%s: %d effects committed, want %d", c.name, n, c.wantEffect)
		}
	}
}
