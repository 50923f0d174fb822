package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/relaytest"
)

// TestIntegrationSIGTERMWithTheDrainCutExits3AndTheNextRunResends: a
// webhook that does not answer holds a delivery in flight; SIGTERM drains
// for relay.shutdown_timeout, then cdc run stops with exit 3 ("stopped,
// deliveries in flight will be sent again"), having confirmed nothing past
// it. The next run sends the message again, and once the webhook answers,
// SIGTERM drains everything and exits 0.
func TestIntegrationSIGTERMWithTheDrainCutExits3AndTheNextRunResends(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	var (
		answer   atomic.Bool
		requests atomic.Int32
		mu       sync.Mutex
		ids      []string
	)
	hang := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		if !answer.Load() {
			select { // hold the delivery until the test ends
			case <-hang:
			case <-r.Context().Done():
			}
			http.Error(w, "gone", http.StatusServiceUnavailable)
			return
		}
		mu.Lock()
		ids = append(ids, r.Header.Get("X-Message-Id"))
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(hang) })
	cfg := ob.Config(t, fmt.Sprintf("  - {name: hook, kind: webhook, url: %q, timeout: 60s}", srv.URL), "relay: {shutdown_timeout: 1s, retry_backoff: 200ms}")
	cdcInit(t, cfg)
	conn := pgtest.Connect(t, url)

	p := startCDC(t, "run", "--config", cfg)
	m := relaytest.NewMsg("t", "k", 1)
	ob.InsertTx(t, conn, m)
	pgtest.Await(t, 60*time.Second, "the webhook receives the message", func() bool { return requests.Load() > 0 })
	before := relaytest.SlotConfirmed(t, conn, ob.Slot)
	p.Cmd.Process.Signal(syscall.SIGTERM)
	if code := p.Wait(30 * time.Second); code != 3 {
		t.Fatalf("SIGTERM with a delivery the webhook holds: exit %d, want 3\n%s", code, p.Stderr.String())
	}
	if log := p.Stderr.String(); !strings.Contains(log, "relay.shutdown_timeout cut the drain") || !strings.Contains(log, "1 deliveries in flight will be sent again") {
		t.Errorf("the log does not say the drain was cut and what is sent again:\n%s", log)
	}
	if after := relaytest.SlotConfirmed(t, conn, ob.Slot); after != before {
		t.Errorf("the slot moved from %s to %s past a delivery the webhook never acknowledged", before, after)
	}

	answer.Store(true)
	p = startCDC(t, "run", "--config", cfg)
	pgtest.Await(t, 60*time.Second, "the message sent again", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(ids) == 1 && ids[0] == m.ID
	})
	p.Stop(t)
}
