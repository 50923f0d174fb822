package main

import (
	"context"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/relaytest"
)

// TestIntegrationReconnectStaysFastAfterManyFaults: the WAL sender of a
// running `cdc run` is terminated eight times; after each, a message
// committed right after the kill is delivered within 3 s. The reconnect
// backoff returns to its start once a connection streamed: it used to only
// double, so that after a few faults over a relay's life every short
// disconnect cost 15-30 s.
func TestIntegrationReconnectStaysFastAfterManyFaults(t *testing.T) {
	url, ob, out, cfg := fileOutbox(t, "")
	conn := pgtest.Connect(t, url)
	ctx := context.Background()
	p := startCDC(t, "run", "--config", cfg)
	activePID := func() int32 {
		var pid *int32
		conn.QueryRow(ctx, "SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1", ob.Slot).Scan(&pid)
		if pid == nil {
			return 0
		}
		return *pid
	}
	var all []relaytest.Msg
	var worst time.Duration
	for round := range 8 {
		var pid int32
		if !pgtest.WaitFor(30*time.Second, func() bool { pid = activePID(); return pid != 0 }) {
			t.Fatalf("round %d: slot not active\n%s", round, p.Stderr.String())
		}
		if _, err := conn.Exec(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		m := relaytest.NewMsg("t", "k", round)
		ob.InsertTx(t, conn, m)
		all = append(all, m)
		relaytest.WaitAllDelivered(t, out, all, 30*time.Second, p.Stderr.String)
		d := time.Since(killed)
		worst = max(worst, d)
		if d > 3*time.Second {
			t.Errorf("round %d: %v from the WAL sender's kill to the next delivery, want under 3 s", round, d)
		}
		pgtest.WaitFor(10*time.Second, func() bool { return activePID() != pid })
	}
	t.Logf("8 WAL sender kills: worst time from a kill to the next delivery %v", worst.Round(time.Millisecond))
}
