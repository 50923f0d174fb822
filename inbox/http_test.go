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
// handler answers 401, committing nothing, to a request that is not
// signed, whose body or id was changed after signing (a captured request
// replayed under a fresh id within the tolerance), that is signed with
// another secret or whose signature is stale, and processes a request
// signed with any of the secrets once.
func TestIntegrationHTTPHandlerVerifiesSignatures(t *testing.T) {
	f := newFixture(t)
	ib := f.open(t, variants[0], Options{}, 4).(pgxInbox)
	secret, old := []byte("new secret"), []byte("old secret")
	var mu sync.Mutex
	var rejected []error
	h := HTTPHandler(ib.Inbox, func(ctx context.Context, tx pgx.Tx, d Delivery) error {
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

	body := `{"id":"s1","n":1}`
	now := time.Now()
	sign := func(secret []byte, at time.Time, id, body string) string { return Sign(secret, at, id, []byte(body)) }
	for _, c := range []struct {
		name       string
		sig        string // "" sends no signature header
		id         string // the id header; "" sends none (the body's id is used)
		body       string
		wantStatus int
		wantErr    error
		wantEffect int
	}{
		{"unsigned", "", "s1", body, 401, ErrNoSignature, 0},
		{"body changed after signing", sign(secret, now, "s1", body), "s1", `{"id":"s1","n":2}`, 401, ErrBadSignature, 0},
		{"another secret", sign([]byte("guess"), now, "s1", body), "s1", body, 401, ErrBadSignature, 0},
		{"stale", sign(secret, now.Add(-2*time.Minute), "s1", body), "s1", body, 401, ErrStaleSignature, 0},
		{"signed for another id", sign(secret, now, "s0", body), "s1", body, 401, ErrBadSignature, 0},
		{"signed", sign(secret, now, "s1", body), "s1", body, 200, nil, 1},
		{"replayed with a fresh id", sign(secret, now, "s1", body), "s1-replay", body, 401, ErrBadSignature, 1},
		{"replayed with the id in the body changed", sign(secret, now, "s1", body), "", `{"id":"s2","n":1}`, 401, ErrBadSignature, 1},
		{"redelivered with the old secret", sign(old, now, "s1", body), "s1", body, 200, nil, 1},
		{"id from the body, signed", sign(secret, now, "s1", body), "", body, 200, nil, 1},
	} {
		req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		if c.id != "" {
			req.Header.Set(DefaultIDHeader, c.id)
		}
		if c.sig != "" {
			req.Header.Set(SignatureHeader, c.sig)
		}
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
}
