package relay

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/file"
	"github.com/walpost/walpost/internal/relaytest"
)

// gate is a test sink that fails while closed and appends to a file sink
// while open: a broker that is down, then back.
var gates = struct {
	sync.Mutex
	open map[string]bool
}{open: map[string]bool{}}

func setGate(path string, open bool) {
	gates.Lock()
	gates.open[path] = open
	gates.Unlock()
}

type gateSink struct {
	path string
	file *file.Sink
}

func init() {
	publish.Register("testgate", func(cfg *config.Sink, log zerolog.Logger) (publish.Opener, error) {
		var c struct {
			Path string `yaml:"path"`
		}
		if err := cfg.Decode(&c); err != nil {
			return nil, err
		}
		return func(context.Context) (publish.Sink, error) {
			f, err := file.Open(cfg.Name, c.Path, false)
			if err != nil {
				return nil, err
			}
			return &gateSink{path: c.Path, file: f}, nil
		}, nil
	})
}

func (g *gateSink) Name() string { return g.file.Name() }
func (g *gateSink) Close() error { return g.file.Close() }
func (g *gateSink) Publish(ctx context.Context, msgs []*message.Message) error {
	gates.Lock()
	open := g.open()
	gates.Unlock()
	if !open {
		return errors.New("gate closed (broker down)")
	}
	return g.file.Publish(ctx, msgs)
}
func (g *gateSink) open() bool { return gates.open[g.path] }

// TestIntegrationFanOutSlowSinkHoldsTheSlotAndOnlyItGetsDuplicates: with
// one sink down, the other keeps receiving while the slot stays at the
// down sink's position; after a restart with the sink back, it gets
// everything and the sink that had acknowledged gets no duplicates.
func TestIntegrationFanOutSlowSinkHoldsTheSlotAndOnlyItGetsDuplicates(t *testing.T) {
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.jsonl"), filepath.Join(dir, "b.jsonl")
	setGate(b, false)
	sinks := fmt.Sprintf("  - {name: a, kind: file, path: %s}\n  - {name: b, kind: testgate, path: %s, route: {include: [\"order.*\"]}}", a, b)
	cfgPath := ob.Config(t, sinks, "relay: {shutdown_timeout: 1s, retry_backoff: 200ms}")
	conn := pgtest.Connect(t, url)
	r := startRelay(t, cfgPath)
	start := relaytest.SlotConfirmed(t, conn, ob.Slot)

	var all []relaytest.Msg
	for i := 0; i < 20; i++ {
		m := []relaytest.Msg{relaytest.NewMsg("order.created", "k", i), relaytest.NewMsg("audit.only", "k", i)}
		ob.InsertTx(t, conn, m...)
		all = append(all, m...)
	}
	waitLines(t, a, len(all), 20*time.Second)
	// Give the relay time to (wrongly) confirm; the slot must not move
	// past the first transaction b has not acknowledged.
	time.Sleep(1500 * time.Millisecond)
	first := relaytest.ReadLines(t, a)[0]
	if c := relaytest.SlotConfirmed(t, conn, ob.Slot); c > relaytest.ParseLSN(t, first.CommitLSN) {
		t.Fatalf("slot confirmed %s past commit %s, which sink b has not acknowledged", c, first.CommitLSN)
	}
	if err := r.stop(t); err == nil {
		t.Fatal("stop with a sink that cannot drain returned nil, want the drain error")
	}
	if c := relaytest.SlotConfirmed(t, conn, ob.Slot); c > relaytest.ParseLSN(t, first.CommitLSN) || c < start {
		t.Fatalf("after stop the slot is at %s", c)
	}

	setGate(b, true)
	startRelay(t, cfgPath)
	var orders int
	for _, m := range all {
		if m.Type == "order.created" {
			orders++
		}
	}
	waitLines(t, b, orders, 30*time.Second)
	more := relaytest.NewMsg("order.created", "k", 99)
	ob.InsertTx(t, conn, more)
	waitLines(t, a, len(all)+1, 20*time.Second)
	waitLines(t, b, orders+1, 20*time.Second)
	la, lb := relaytest.ReadLines(t, a), relaytest.ReadLines(t, b)
	if len(la) != len(all)+1 {
		t.Fatalf("sink a has %d lines, want %d: it got duplicates of what it had acknowledged", len(la), len(all)+1)
	}
	for _, l := range lb {
		if l.Type != "order.created" {
			t.Fatalf("sink b got type %s, outside its route", l.Type)
		}
	}
	if len(lb) != orders+1 {
		t.Fatalf("sink b has %d lines, want %d", len(lb), orders+1)
	}
	if !pgtest.WaitFor(10*time.Second, func() bool {
		return relaytest.SlotConfirmed(t, conn, ob.Slot) > relaytest.ParseLSN(t, lb[len(lb)-1].CommitLSN)
	}) {
		t.Fatal("slot did not advance once both sinks caught up")
	}
}

// TestIntegrationLongSinkOutageKeepsTheReplicationConnection: with the
// window full behind a sink that is down for longer than the server's
// wal_sender_timeout, the relay keeps the connection alive with status
// updates instead of being cut off, and delivers everything after.
func TestIntegrationLongSinkOutageKeepsTheReplicationConnection(t *testing.T) {
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	// wal_sender_timeout is user-settable: 2s for this connection only.
	ob.URL = url + "&options=-c%20wal_sender_timeout%3D2s"
	gated := filepath.Join(t.TempDir(), "gated.jsonl")
	setGate(gated, false)
	cfgPath := ob.Config(t, fmt.Sprintf("  - {name: g, kind: testgate, path: %s}", gated),
		"relay: {window_messages: 20, batch_size: 5, retry_backoff: 200ms}")
	conn := pgtest.Connect(t, url)
	r := startRelay(t, cfgPath)
	var all []relaytest.Msg
	for i := 0; i < 200; i++ {
		all = append(all, relaytest.NewMsg("t", fmt.Sprint(i%3), i))
	}
	ob.InsertTx(t, conn, all...)
	time.Sleep(7 * time.Second) // > 3 × wal_sender_timeout with the pipeline full
	if strings.Contains(r.logs.String(), "replication connection lost") {
		t.Fatalf("the server cut the replication connection while the pipeline was full:\n%s", r.logs.String())
	}
	setGate(gated, true)
	waitLines(t, gated, len(all), 30*time.Second)
	if lines := relaytest.ReadLines(t, gated); len(lines) != len(all) {
		t.Fatalf("%d lines, want %d", len(lines), len(all))
	}
}
