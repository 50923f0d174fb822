package relay

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/relaytest"
)

// TestIntegrationStandbyReadsSinkProgressWhenItTakesOver: everything a
// relay reads about the slot's state it reads once it holds the slot. A
// standby started while the active relay is mid-way used to load the
// per-sink progress at its start; after taking over it sent a fast sink
// again everything that sink acknowledged while the standby waited.
func TestIntegrationStandbyReadsSinkProgressWhenItTakesOver(t *testing.T) {
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	dir := t.TempDir()
	fast, slow := filepath.Join(dir, "fast.jsonl"), filepath.Join(dir, "slow.jsonl")
	setGate(slow, false)
	sinks := fmt.Sprintf("  - {name: fast, kind: file, path: %s}\n  - {name: slow, kind: testgate, path: %s}", fast, slow)
	cfgPath := ob.Config(t, sinks, "relay: {shutdown_timeout: 1s, retry_backoff: 200ms}")
	conn := pgtest.Connect(t, url)
	batch := func(n int) []relaytest.Msg {
		msgs := make([]relaytest.Msg, n)
		for i := range msgs {
			msgs[i] = relaytest.NewMsg("t", "k", i)
		}
		ob.InsertTx(t, conn, msgs...)
		return msgs
	}

	active := startRelay(t, cfgPath)
	all := batch(100)
	waitLines(t, fast, 100, 20*time.Second)
	standby := startRelay(t, cfgPath)
	if !pgtest.WaitFor(20*time.Second, func() bool { return strings.Contains(standby.logs.String(), "held by another process") }) {
		t.Fatal("the standby did not wait for the slot")
	}
	all = append(all, batch(100)...)
	waitLines(t, fast, 200, 20*time.Second)
	active.stop(t) // the slow sink cannot drain: an error, and the slot stays at the start

	setGate(slow, true)
	relaytest.WaitAllDelivered(t, slow, all, 30*time.Second, standby.logs.String)
	more := batch(1)
	relaytest.WaitAllDelivered(t, fast, append(all, more...), 30*time.Second, standby.logs.String)
	if n := relaytest.CountLines(fast); n != 201 {
		t.Fatalf("the fast sink has %d lines, want 201: the standby sent it again what it had acknowledged while the standby waited", n)
	}
}
