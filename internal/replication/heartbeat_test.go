package replication_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/checkpoint"
	"github.com/walpost/walpost/internal/decoder"
	"github.com/walpost/walpost/internal/layout"
	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/relaytest"
	"github.com/walpost/walpost/internal/replication"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// streamed is a Stream on a test's own outbox, table, publication and slot,
// read by a consumer that decodes every message like the relay's pipeline
// but confirms only points outside any transaction (decoder.Progress). It
// ignores keepalives: that models a WAL sender too busy decoding other
// tables to send any, so that while the outbox is idle only a heartbeat can
// move the slot.
type streamed struct {
	ob      relaytest.Outbox
	stream  *replication.Stream
	tracker *checkpoint.Tracker
	log     zerolog.Logger

	mu         sync.Mutex
	heartbeats int            // heartbeat messages received
	rows       map[string]int // outbox row id → heartbeats received before it
	err        error          // first decoding failure
}

// startStream creates the test's outbox, publication and slot and streams
// from the slot until the test ends. It returns once the stream is
// connected.
func startStream(t *testing.T) *streamed {
	t.Helper()
	s := newStreamed(t)
	s.start(t)
	return s
}

// newStreamed creates the test's outbox, publication and slot; start
// streams from the slot.
func newStreamed(t *testing.T) *streamed {
	t.Helper()
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	schema, table, _ := strings.Cut(ob.Table, ".")
	target := replication.Target{Outbox: layout.Table{Schema: schema, Name: table, Columns: layout.Default}, Publication: ob.Publication, Slot: ob.Slot}
	ctx := context.Background()
	conn := pgtest.Connect(t, url)
	if _, err := replication.EnsurePublication(ctx, conn, target); err != nil {
		t.Fatal(err)
	}
	info, _, err := replication.EnsureSlot(ctx, conn, target.Slot)
	if err != nil {
		t.Fatal(err)
	}

	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.DebugLevel).With().Timestamp().Logger()
	s := &streamed{ob: ob, tracker: checkpoint.New(info.ConfirmedFlush), log: log, rows: map[string]int{}}
	s.stream = replication.NewStream(replication.StreamOptions{
		URL: url, Slot: ob.Slot, Publication: ob.Publication, Log: log,
	}, s.tracker)
	return s
}

// start streams from the slot until the test ends; it returns once the
// stream is connected.
func (s *streamed) start(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	schema, table, _ := strings.Cut(s.ob.Table, ".")
	dec := decoder.New(decoder.Mapping{Schema: schema, Name: table, Columns: layout.Default})

	events := make(chan []replication.Event, 64)
	readCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	consumed := make(chan struct{})
	go func() { ran <- s.stream.Run(readCtx, ctx, events) }()
	go func() {
		defer close(consumed)
		s.consume(events, dec)
	}()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-ran:
			if err != nil {
				t.Errorf("Stream.Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Stream.Run did not return within 30s of its context ending")
		}
		<-consumed
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.err != nil {
			t.Errorf("decoding the stream: %v", s.err)
		}
	})
	if !pgtest.WaitFor(10*time.Second, s.stream.Connected) {
		t.Fatal("stream not connected within 10s")
	}
}

func (s *streamed) consume(events <-chan []replication.Event, dec *decoder.Decoder) {
	for batch := range events {
		for _, ev := range batch {
			switch ev.Kind {
			case replication.Reset:
				dec.Reset()
			case replication.Keepalive:
				// Ignored; see streamed.
			case replication.Data:
				hb := isHeartbeat(ev.Data)
				e, err := dec.Decode(ev.LSN, ev.Data)
				s.mu.Lock()
				switch {
				case err != nil:
					if s.err == nil {
						s.err = err
					}
				case e.Kind == decoder.Progress:
					s.tracker.Progress(e.LSN)
				case e.Kind == decoder.Row:
					s.rows[e.Msg.ID] = s.heartbeats
				}
				if hb {
					s.heartbeats++
				}
				s.mu.Unlock()
			}
		}
	}
}

// isHeartbeat reports whether data is a pgoutput logical message written by
// RunHeartbeat: non-transactional, with decoder.HeartbeatPrefix.
func isHeartbeat(data []byte) bool {
	if len(data) == 0 || data[0] != 'M' {
		return false
	}
	m, err := pglogrepl.Parse(data)
	if err != nil {
		return false
	}
	lm, ok := m.(*pglogrepl.LogicalDecodingMessage)
	return ok && !lm.Transactional && lm.Prefix == decoder.HeartbeatPrefix
}

func (s *streamed) heartbeatCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.heartbeats
}

// startHeartbeat runs RunHeartbeat on s until the returned stop is called
// or the test ends; stop checks that it returned nil.
func (s *streamed) startHeartbeat(t *testing.T, interval time.Duration) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- replication.RunHeartbeat(ctx, s.ob.URL, interval, s.stream, s.log) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("RunHeartbeat returned %v after its context ended, want nil", err)
				}
			case <-time.After(10 * time.Second):
				t.Error("RunHeartbeat did not return within 10s of its context ending")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// insert commits one outbox row and returns its id.
func (s *streamed) insert(t *testing.T, conn *pgx.Conn) string {
	t.Helper()
	m := relaytest.NewMsg("heartbeat.test", "k", 0)
	s.ob.InsertTx(t, conn, m)
	return m.ID
}

// waitRow waits until the outbox row id has arrived in the stream and
// returns how many heartbeats arrived before it.
func (s *streamed) waitRow(t *testing.T, id string) int {
	t.Helper()
	before := -1
	ok := pgtest.WaitFor(10*time.Second, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		n, seen := s.rows[id]
		if seen {
			before = n
		}
		return seen
	})
	if !ok {
		t.Fatalf("outbox row %s not received within 10s", id)
	}
	return before
}

// otherTable creates a table outside the publication and returns a function
// that writes to it and returns the WAL position after the commit.
func otherTable(t *testing.T, conn *pgx.Conn) (write func() pglogrepl.LSN) {
	t.Helper()
	ctx := context.Background()
	name := pgtest.Name(t, "other")
	if _, err := conn.Exec(ctx, "CREATE TABLE "+name+" (n int)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = conn.Exec(context.Background(), "DROP TABLE IF EXISTS "+name) })
	return func() pglogrepl.LSN {
		t.Helper()
		if _, err := conn.Exec(ctx, "INSERT INTO "+name+" SELECT g FROM generate_series(1, 100) g"); err != nil {
			t.Fatal(err)
		}
		var s string
		if err := conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&s); err != nil {
			t.Fatal(err)
		}
		lsn, err := pglogrepl.ParseLSN(s)
		if err != nil {
			t.Fatal(err)
		}
		return lsn
	}
}

func TestIntegrationHeartbeatMovesTheSlotPastOtherTablesWALWhileTheOutboxIsIdle(t *testing.T) {
	s := startStream(t)
	conn := pgtest.Connect(t, s.ob.URL)
	writeOther := otherTable(t, conn)
	const interval = 150 * time.Millisecond

	wal := writeOther()
	if c := relaytest.SlotConfirmed(t, conn, s.ob.Slot); c >= wal {
		t.Fatalf("slot confirmed at %s before any heartbeat, already past the other table's WAL at %s", c, wal)
	}
	s.startHeartbeat(t, interval)

	// Twice: the heartbeat keeps going while the outbox stays idle, it is
	// not a single write at start.
	for round := 1; round <= 2; round++ {
		if round == 2 {
			wal = writeOther()
		}
		var confirmed pglogrepl.LSN
		if !pgtest.WaitFor(10*time.Second, func() bool {
			confirmed = relaytest.SlotConfirmed(t, conn, s.ob.Slot)
			return confirmed >= wal
		}) {
			t.Fatalf("round %d: slot confirmed at %s, not past the other table's WAL at %s after 10s; %d heartbeats received",
				round, confirmed, wal, s.heartbeatCount())
		}
	}
	if n := s.heartbeatCount(); n < 2 {
		t.Fatalf("%d heartbeat messages received, want at least 2", n)
	}
}

func TestIntegrationHeartbeatIsNotWrittenWhileTheStreamReceivesTraffic(t *testing.T) {
	s := startStream(t)
	conn := pgtest.Connect(t, s.ob.URL)
	const (
		interval = 250 * time.Millisecond
		ticks    = 8
	)
	s.waitRow(t, s.insert(t, conn)) // streaming, and received just now
	s.startHeartbeat(t, interval)

	// A row every 20 ms, far more often than the interval, for 8 ticks.
	pace := time.NewTicker(20 * time.Millisecond)
	defer pace.Stop()
	for end := time.Now().Add(ticks * interval); time.Now().Before(end); {
		s.insert(t, conn)
		<-pace.C
	}
	// Heartbeats written before the last row's commit arrive before it.
	during := s.waitRow(t, s.insert(t, conn))
	// One is tolerated for a stall of a whole interval on a loaded machine;
	// a heartbeat that ignores traffic writes one per tick.
	if during > 1 {
		t.Fatalf("%d heartbeats written in %d intervals of steady traffic, want none", during, ticks)
	}
	// The heartbeat was live all along: once traffic stops, it writes.
	if !pgtest.WaitFor(10*time.Second, func() bool { return s.heartbeatCount() > during }) {
		t.Fatal("no heartbeat within 10s after traffic stopped")
	}
}

func TestIntegrationHeartbeatIntervalZeroOrNegativeWritesNothing(t *testing.T) {
	s := startStream(t)
	conn := pgtest.Connect(t, s.ob.URL)
	for _, interval := range []time.Duration{0, -time.Second} {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			defer func() {
				if r := recover(); r != nil {
					done <- fmt.Errorf("panic: %v", r)
				}
			}()
			done <- replication.RunHeartbeat(ctx, s.ob.URL, interval, s.stream, s.log)
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("RunHeartbeat(interval %v) = %v, want nil", interval, err)
			}
		case <-time.After(2 * time.Second):
			t.Errorf("RunHeartbeat(interval %v) still running after 2s, want it to return at once", interval)
			cancel()
			<-done
		}
		cancel()
	}
	// A heartbeat written before the row's commit arrives before it.
	if n := s.waitRow(t, s.insert(t, conn)); n != 0 {
		t.Fatalf("%d heartbeats written with the heartbeat disabled, want none", n)
	}
}

// A standby (a stream that is not connected: another instance holds the
// slot, or the connection is down) writes no heartbeats; they would only
// add WAL for the active instance to read.
func TestIntegrationHeartbeatIsNotWrittenWhileTheStreamIsNotConnected(t *testing.T) {
	s := newStreamed(t) // its slot exists, so heartbeats written now would reach the stream later
	const interval = 50 * time.Millisecond
	stop := s.startHeartbeat(t, interval)
	time.Sleep(10 * interval)
	stop()

	s.start(t)
	conn := pgtest.Connect(t, s.ob.URL)
	if n := s.waitRow(t, s.insert(t, conn)); n != 0 {
		t.Fatalf("%d heartbeats written in 10 intervals before the stream connected, want none", n)
	}
	// The same heartbeat writes once the stream is connected and idle.
	s.startHeartbeat(t, interval)
	if !pgtest.WaitFor(10*time.Second, func() bool { return s.heartbeatCount() > 0 }) {
		t.Fatal("no heartbeat within 10s of a connected, idle stream")
	}
}
