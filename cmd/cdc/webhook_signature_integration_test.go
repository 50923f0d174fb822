package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/walpost/walpost/inbox"
	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/relaytest"
)

// memProcessor is an inbox.Processor keeping the processed ids in memory.
type memProcessor struct {
	mu   sync.Mutex
	done map[string]bool
}

func (p *memProcessor) Process(ctx context.Context, id string, effect func(context.Context, struct{}) error) (inbox.Result, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done[id] {
		return inbox.Duplicate, nil
	}
	if err := effect(ctx, struct{}{}); err != nil {
		return 0, err
	}
	p.done[id] = true
	return inbox.Processed, nil
}

// capture is one request as the receiver got it.
type capture struct {
	header http.Header
	body   []byte
}

// TestIntegrationWebhookSignsTypeKeyAndHeaders: the cdc binary's webhook
// sink signs with scheme v2 (t, h naming the signed headers, v2; v1
// beside it by default, none with signature_v1: false), and an
// inbox.HTTPHandler that accepts v2 only runs the effect once per
// message, seeing the type, key and the headers column's traceparent as
// signed. A row header Authorization (or Cookie) never reaches the server,
// while the configured headers: Authorization does. The captured request
// replayed with its X-Message-Type changed to order.refunded, its key or
// traceparent changed, or an unsigned X-Message-* added gets 401 and no
// effect.
func TestIntegrationWebhookSignsTypeKeyAndHeaders(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	const secret = "hook-signing-secret"
	proc := &memProcessor{done: map[string]bool{}}
	var mu sync.Mutex
	var got []capture
	var effects []inbox.Delivery
	h := inbox.HTTPHandler(proc, func(_ context.Context, _ struct{}, d inbox.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		effects = append(effects, d)
		return nil
	}, inbox.HTTPOptions{SigningSecrets: [][]byte{[]byte(secret)}})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, capture{r.Header.Clone(), body})
		mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()

	for _, v1 := range []bool{true, false} {
		t.Run(fmt.Sprintf("signature_v1=%v", v1), func(t *testing.T) {
			mu.Lock()
			got, effects = nil, nil
			mu.Unlock()
			cfg := ob.Config(t, fmt.Sprintf("  - {name: hook, kind: webhook, url: %q, secret: %q, signature_v1: %v, headers: {Authorization: \"Bearer configured\"}}",
				srv.URL+"/hook", secret, v1), "")
			cdcInit(t, cfg)
			conn := pgtest.Connect(t, url)
			m := relaytest.NewMsg("order.created", "order-42", 1)
			m.Headers = map[string]string{"Authorization": "Bearer from-the-row", "cookie": "session=row", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
			ob.InsertTx(t, conn, m)
			relay := startCDC(t, "run", "--config", cfg)
			defer relay.Kill9(t)
			if !pgtest.WaitFor(60*time.Second, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(effects) > 0
			}) {
				t.Fatalf("the webhook's effect did not run\n%s", relay.Stderr.String())
			}
			mu.Lock()
			req, eff := got[len(got)-1], effects[0]
			mu.Unlock()
			sig := req.header.Get(inbox.SignatureHeader)
			if !strings.Contains(sig, ",h=") || !strings.Contains(sig, ",v2=") || strings.Contains(sig, ",v1=") != v1 {
				t.Errorf("%s: %q, want t=,h=,v2= (v1 beside it: %v)", inbox.SignatureHeader, sig, v1)
			}
			for _, n := range []string{"x-message-type", "x-message-key", "x-message-id", "idempotency-key", "content-type", "traceparent"} {
				if !strings.Contains(sig, n) {
					t.Errorf("%s: %q does not name %s among the signed headers", inbox.SignatureHeader, sig, n)
				}
			}
			if a := req.header.Values("Authorization"); len(a) != 1 || a[0] != "Bearer configured" {
				t.Errorf("the server got Authorization %q, want only the configured one (the row's must not reach it)", a)
			}
			if c := req.header.Get("Cookie"); c != "" {
				t.Errorf("the server got the row's Cookie %q", c)
			}
			if eff.ID != m.ID || eff.Header.Get("X-Message-Type") != "order.created" || eff.Header.Get("X-Message-Key") != "order-42" ||
				eff.Header.Get("Traceparent") == "" || eff.Header.Get("Authorization") != "" {
				t.Errorf("the effect saw id %s, headers %v; want %s, the signed type, key and traceparent, no Authorization", eff.ID, eff.Header, m.ID)
			}
			for _, c := range []struct {
				name   string
				edit   func(http.Header)
				status int
			}{
				{"type changed to order.refunded", func(h http.Header) { h.Set("X-Message-Type", "order.refunded") }, 401},
				{"key changed", func(h http.Header) { h.Set("X-Message-Key", "order-43") }, 401},
				{"traceparent changed", func(h http.Header) {
					h.Set("Traceparent", "00-00000000000000000000000000000001-00f067aa0ba902b7-01")
				}, 401},
				{"an unsigned X-Message- header added", func(h http.Header) { h.Set("X-Message-Tenant", "evil") }, 401},
				{"replayed as it was", func(http.Header) {}, 200},
			} {
				hd := req.header.Clone()
				c.edit(hd)
				r, err := http.NewRequest(http.MethodPost, srv.URL+"/hook", bytes.NewReader(req.body))
				if err != nil {
					t.Fatal(err)
				}
				r.Header = hd
				resp, err := http.DefaultClient.Do(r)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != c.status {
					t.Errorf("%s: %d, want %d", c.name, resp.StatusCode, c.status)
				}
			}
			mu.Lock()
			n := len(effects)
			mu.Unlock()
			if n != 1 {
				t.Errorf("%d effects, want 1", n)
			}
		})
	}
}
