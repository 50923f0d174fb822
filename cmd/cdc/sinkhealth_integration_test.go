package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/publish/rabbitmq/rabbittest"
	"github.com/walpost/walpost/internal/relaytest"
	"github.com/walpost/walpost/internal/tcpproxy"
)

// TestIntegrationStatusShowsAFailingSink: two sinks behind proxies the
// test cuts, a webhook whose URL carries a token and RabbitMQ. The
// webhook is unreachable from the start (it never acknowledges anything),
// RabbitMQ is cut once a first message went through. While the relay
// retries, cdc status names each failing sink with the time it started
// failing and its last error (no secret of the config in it), in text and
// JSON, and exits 1; after a kill -9 of the relay it still does, saying
// the record is the last relay's; once both sinks are back and a relay
// runs again and delivers, cdc status exits 0 and shows no failing sink.
func TestIntegrationStatusShowsAFailingSink(t *testing.T) {
	t.Parallel()
	rabbitURL := rabbittest.Start(t) // skips without RabbitMQ
	u := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, u)
	conn := pgtest.Connect(t, u)

	var hooked atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hooked.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	hookProxy, err := tcpproxy.New(strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hookProxy.Close)
	hookProxy.Cut() // down from the start

	rabbit := rabbittest.Declare(t, rabbitURL, rabbittest.Topology{})
	ru, err := url.Parse(rabbitURL)
	if err != nil {
		t.Fatal(err)
	}
	rabbitProxy, err := tcpproxy.New(ru.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rabbitProxy.Close)
	proxied := *ru
	proxied.Host = rabbitProxy.Addr()

	const token = "tok-9f3c1e77d2"
	sinks := fmt.Sprintf("  - {name: hook, kind: webhook, url: %q, timeout: 2s}\n  - {name: rabbit, kind: rabbitmq, url: %q, exchange: %q, timeout: 2s}",
		"http://"+hookProxy.Addr()+"/hook?token="+token, proxied.String(), rabbit.Exchange)
	cfg := ob.Config(t, sinks, "relay: {retry_backoff: 300ms}")
	cdcInit(t, cfg)

	failing := func() map[string]string {
		out := map[string]string{}
		rows, err := conn.Query(context.Background(), "SELECT sink, coalesce(last_error, '') FROM public.walpost_sink_progress WHERE slot = $1 AND failing_since IS NOT NULL", ob.Slot)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var s, e string
			if err := rows.Scan(&s, &e); err != nil {
				t.Fatal(err)
			}
			out[s] = e
		}
		return out
	}

	p := startCDC(t, "run", "--config", cfg)
	ob.InsertTx(t, conn, relaytest.NewMsg("t", "k", 0))
	rabbittest.Await(t, rabbitURL, rabbit.Queue, 1, 30*time.Second)
	rabbitProxy.Cut()
	ob.InsertTx(t, conn, relaytest.NewMsg("t", "k", 1))
	pgtest.Await(t, 60*time.Second, "both sinks recorded failing", func() bool {
		f := failing()
		return f["hook"] != "" && f["rabbit"] != ""
	})

	code, stdout, stderr := cdc(t, nil, "status", "--config", cfg)
	all := stdout + stderr
	if code != 1 || !strings.Contains(stdout, "sink hook:     FAILING since ") || !strings.Contains(stdout, "sink rabbit:   FAILING since ") ||
		!strings.Contains(stderr, "is failing since") || strings.Contains(all, token) {
		t.Fatalf("cdc status with both sinks failing: exit %d, want 1 naming each failing sink and its last error, without the token\n%s\n%s\nrelay:\n%s",
			code, stdout, stderr, p.Stderr.String())
	}
	if !strings.Contains(stdout, "sink hook:     no progress saved yet") {
		t.Errorf("the webhook never acknowledged anything: want its 'no progress saved yet' kept beside FAILING\n%s", stdout)
	}
	code, st, _ := statusJSONOf(t, cfg)
	var sinksOut []struct {
		Name         string  `json:"name"`
		Failing      bool    `json:"failing"`
		FailingSince *string `json:"failing_since"`
		LastError    *string `json:"last_error"`
		Acked        *string `json:"acknowledged_commit_lsn"`
	}
	b, _ := json.Marshal(st["sinks"])
	if err := json.Unmarshal(b, &sinksOut); err != nil {
		t.Fatal(err)
	}
	if code != 1 || len(sinksOut) != 2 || !sinksOut[0].Failing || !sinksOut[1].Failing || sinksOut[0].LastError == nil || *sinksOut[0].LastError == "" ||
		sinksOut[0].FailingSince == nil || sinksOut[0].Acked != nil || sinksOut[1].Acked == nil || strings.Contains(string(b), token) {
		t.Fatalf("cdc status --json: exit %d, sinks %s", code, b)
	}

	// Killed while the sinks fail: the record stays, and says so.
	p.Kill9(t)
	pgtest.Await(t, 30*time.Second, "the slot inactive", func() bool {
		var active bool
		conn.QueryRow(context.Background(), "SELECT active FROM pg_replication_slots WHERE slot_name = $1", ob.Slot).Scan(&active)
		return !active
	})
	code, stdout, stderr = cdc(t, nil, "status", "--config", cfg)
	if code != 1 || !strings.Contains(stdout, "FAILING since") || !strings.Contains(stderr, "which is not running now") {
		t.Fatalf("cdc status after the relay was killed with failing sinks: exit %d, want 1 saying the record is the last relay's\n%s\n%s", code, stdout, stderr)
	}

	hookProxy.Restore()
	if err := rabbitProxy.Restore(); err != nil {
		t.Fatal(err)
	}
	p = startCDC(t, "run", "--config", cfg)
	rabbittest.Await(t, rabbitURL, rabbit.Queue, 1, 60*time.Second)
	pgtest.Await(t, 60*time.Second, "the failing state cleared", func() bool { return len(failing()) == 0 })
	if hooked.Load() == 0 {
		t.Errorf("the webhook got no request")
	}
	code, stdout, stderr = cdc(t, nil, "status", "--config", cfg)
	if code != 0 || strings.Contains(stdout, "FAILING") || strings.Contains(stdout, "no progress saved yet") {
		t.Fatalf("cdc status once both sinks are back: exit %d, want 0 and no failing sink\n%s\n%s", code, stdout, stderr)
	}
	p.Stop(t)
}
