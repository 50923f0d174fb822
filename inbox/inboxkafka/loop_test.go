package inboxkafka

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/inbox"
	kafkasink "github.com/walpost/walpost/internal/publish/kafka"
)

// Both inboxes fit Loop as they are, the transaction type inferred
// from the effect.
var (
	_ = func(ctx context.Context, r *kafka.Reader, ib *inbox.Inbox) error {
		return Loop(ctx, r, ib, func(context.Context, pgx.Tx, kafka.Message) error { return nil }, Options{})
	}
	_ = func(ctx context.Context, r *kafka.Reader, ib *inbox.SQLInbox) error {
		return Loop(ctx, r, ib, func(context.Context, *sql.Tx, kafka.Message) error { return nil }, Options{})
	}
)

func TestDefaultIDHeaderIsTheSinksHeader(t *testing.T) {
	if DefaultIDHeader != kafkasink.HeaderID {
		t.Fatalf("DefaultIDHeader %q, but the kafka sink puts the id in header %q", DefaultIDHeader, kafkasink.HeaderID)
	}
}

// fakeReader serves msgs in order, then blocks until ctx ends. commitErr,
// when set, decides the outcome of each commit.
type fakeReader struct {
	mu        sync.Mutex
	msgs      []kafka.Message
	commits   []int64 // offsets committed, in order
	commitErr func(call int) error
	calls     int
}

func (r *fakeReader) FetchMessage(ctx context.Context) (kafka.Message, error) {
	r.mu.Lock()
	if len(r.msgs) > 0 {
		m := r.msgs[0]
		r.msgs = r.msgs[1:]
		r.mu.Unlock()
		return m, nil
	}
	r.mu.Unlock()
	<-ctx.Done()
	return kafka.Message{}, ctx.Err()
}

func (r *fakeReader) CommitMessages(ctx context.Context, msgs ...kafka.Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	if r.commitErr != nil {
		if err := r.commitErr(r.calls); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, m := range msgs {
		r.commits = append(r.commits, m.Offset)
	}
	return nil
}

func (r *fakeReader) committed() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return fmt.Sprint(r.commits)
}

// fakeProcessor records ids in memory; its "transaction" is the id.
// beginErr, when set, fails an attempt before the effect runs, as a
// database that cannot begin would.
type fakeProcessor struct {
	seen     map[string]bool
	beginErr func() error
}

func (p *fakeProcessor) Process(ctx context.Context, id string, effect func(ctx context.Context, tx string) error) (inbox.Result, error) {
	if p.beginErr != nil {
		if err := p.beginErr(); err != nil {
			return 0, err
		}
	}
	if p.seen[id] {
		return inbox.Duplicate, nil
	}
	if err := effect(ctx, id); err != nil {
		return 0, err
	}
	p.seen[id] = true
	return inbox.Processed, nil
}

// record returns the record at offset of partition t[0], with the id in
// DefaultIDHeader; id "" gives a record without an id.
func record(offset int64, id string) kafka.Message {
	m := kafka.Message{Topic: "t", Partition: 0, Offset: offset}
	if id != "" {
		m.Headers = []kafka.Header{{Key: "type", Value: []byte("x")}, {Key: DefaultIDHeader, Value: []byte(id)}}
	}
	return m
}

// runFake runs Loop over r until the n-th message was committed or the
// loop returns, and returns the loop's error (nil if it was still running
// and had to be stopped).
func runFake(t *testing.T, r *fakeReader, p *fakeProcessor, effect func(context.Context, string, kafka.Message) error, opts Options, n int) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var done atomic.Int32
	user := opts.OnCommitted
	opts.OnCommitted = func(m kafka.Message, id string, res inbox.Result) {
		if user != nil {
			user(m, id, res)
		}
		if int(done.Add(1)) == n {
			cancel()
		}
	}
	if opts.RetryBackoff == 0 {
		opts.RetryBackoff = time.Millisecond
	}
	errc := make(chan error, 1)
	go func() { errc <- Loop(ctx, r, p, effect, opts) }()
	select {
	case err := <-errc:
		if errors.Is(err, context.Canceled) && int(done.Load()) == n {
			return nil
		}
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Loop did not finish in 10s")
		return nil
	}
}

func noEffect(context.Context, string, kafka.Message) error { return nil }

func TestLoopStopsAtARecordWithoutAnIDByDefault(t *testing.T) {
	r := &fakeReader{msgs: []kafka.Message{record(0, "a"), record(1, ""), record(2, "c")}}
	p := &fakeProcessor{seen: map[string]bool{}}
	err := runFake(t, r, p, noEffect, Options{}, 3)
	if !errors.Is(err, inbox.ErrEmptyID) || !strings.Contains(err.Error(), "t[0]@1") {
		t.Fatalf("error = %v, want inbox.ErrEmptyID naming record t[0]@1", err)
	}
	if got := r.committed(); got != "[0]" {
		t.Fatalf("committed offsets %s, want [0]: nothing at or past the record without an id", got)
	}
	if p.seen["c"] {
		t.Fatal("the message after the poison one was processed")
	}
}

func TestLoopSkipsAPoisonRecordOnlyWhenOnPoisonSaysSo(t *testing.T) {
	r := &fakeReader{msgs: []kafka.Message{record(0, ""), record(1, "b")}}
	p := &fakeProcessor{seen: map[string]bool{}}
	var poisoned []string
	err := runFake(t, r, p, noEffect, Options{OnPoison: func(ctx context.Context, m kafka.Message, err error) error {
		if !errors.Is(err, inbox.ErrEmptyID) {
			t.Errorf("OnPoison got %v, want inbox.ErrEmptyID", err)
		}
		poisoned = append(poisoned, where(m))
		return nil
	}}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(poisoned) != "[record t[0]@0]" || r.committed() != "[0 1]" || !p.seen["b"] {
		t.Fatalf("poisoned %v, committed %s, b processed %v; want the poison record logged and committed, b processed", poisoned, r.committed(), p.seen["b"])
	}

	// OnPoison returning an error stops the loop with it, uncommitted.
	r = &fakeReader{msgs: []kafka.Message{record(0, "")}}
	stop := errors.New("stop here")
	err = runFake(t, r, p, noEffect, Options{OnPoison: func(context.Context, kafka.Message, error) error { return stop }}, 1)
	if !errors.Is(err, stop) || r.committed() != "[]" {
		t.Fatalf("error %v, committed %s; want OnPoison's error and no commit", err, r.committed())
	}
}

func TestLoopReadsTheLastIDHeaderOfTheConfiguredName(t *testing.T) {
	m := kafka.Message{Headers: []kafka.Header{{Key: "Message-Id", Value: []byte("first")}, {Key: "id", Value: []byte("other")}, {Key: "Message-Id", Value: []byte(" last ")}}}
	r := &fakeReader{msgs: []kafka.Message{m}}
	p := &fakeProcessor{seen: map[string]bool{}}
	if err := runFake(t, r, p, noEffect, Options{IDHeader: "Message-Id"}, 1); err != nil {
		t.Fatal(err)
	}
	if !p.seen["last"] || len(p.seen) != 1 {
		t.Fatalf("processed ids %v, want only %q", p.seen, "last")
	}
}

func TestLoopRetriesAFailingEffectInPlaceBeforeCommitting(t *testing.T) {
	r := &fakeReader{msgs: []kafka.Message{record(0, "a"), record(1, "b")}}
	p := &fakeProcessor{seen: map[string]bool{}}
	attempts := 0
	var reported []string
	err := runFake(t, r, p, func(_ context.Context, id string, m kafka.Message) error {
		if id == "a" {
			attempts++
			if attempts < 4 {
				if got := r.committed(); got != "[]" {
					t.Errorf("attempt %d: offsets %s committed while the first message fails", attempts, got)
				}
				return errors.New("effect failed")
			}
		}
		return nil
	}, Options{OnError: func(m kafka.Message, id string, err error) {
		reported = append(reported, id)
	}}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if attempts != 4 || fmt.Sprint(reported) != "[a a a]" || r.committed() != "[0 1]" {
		t.Fatalf("attempts %d, errors reported for %v, committed %s; want 4, [a a a], [0 1]", attempts, reported, r.committed())
	}
}

func TestLoopCountsOnlyEffectFailuresTowardsMaxAttempts(t *testing.T) {
	// The database fails twice before the effect runs: not the message's
	// fault, so MaxAttempts 2 does not give up on it.
	r := &fakeReader{msgs: []kafka.Message{record(0, "a")}}
	dbDown := 2
	p := &fakeProcessor{seen: map[string]bool{}, beginErr: func() error {
		if dbDown > 0 {
			dbDown--
			return errors.New("connection refused")
		}
		return nil
	}}
	if err := runFake(t, r, p, noEffect, Options{MaxAttempts: 2}, 1); err != nil {
		t.Fatal(err)
	}
	if !p.seen["a"] || r.committed() != "[0]" {
		t.Fatalf("processed %v, committed %s", p.seen, r.committed())
	}

	// The effect fails twice: poison. By default the loop stops, uncommitted.
	boom := errors.New("bad payload")
	failing := func(context.Context, string, kafka.Message) error { return boom }
	r = &fakeReader{msgs: []kafka.Message{record(0, "x")}}
	err := runFake(t, r, p, failing, Options{MaxAttempts: 2}, 1)
	if !errors.Is(err, inbox.ErrTooManyAttempts) || !errors.Is(err, boom) || r.committed() != "[]" {
		t.Fatalf("error %v, committed %s; want inbox.ErrTooManyAttempts wrapping the effect's error, nothing committed", err, r.committed())
	}

	// With OnPoison returning nil, it is committed past, and the next
	// message is processed.
	r = &fakeReader{msgs: []kafka.Message{record(0, "x"), record(1, "y")}}
	var parked []error
	err = runFake(t, r, p, func(ctx context.Context, id string, m kafka.Message) error {
		if id == "x" {
			return boom
		}
		return nil
	}, Options{MaxAttempts: 2, OnPoison: func(ctx context.Context, m kafka.Message, err error) error {
		parked = append(parked, err)
		return nil
	}}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(parked) != 1 || !errors.Is(parked[0], boom) || r.committed() != "[0 1]" || p.seen["x"] || !p.seen["y"] {
		t.Fatalf("parked %v, committed %s, processed %v", parked, r.committed(), p.seen)
	}
}

func TestLoopRetriesAFailedOffsetCommit(t *testing.T) {
	r := &fakeReader{msgs: []kafka.Message{record(0, "a")}, commitErr: func(call int) error {
		if call <= 2 {
			return errors.New("coordinator not available")
		}
		return nil
	}}
	p := &fakeProcessor{seen: map[string]bool{}}
	var errs, committed int
	err := runFake(t, r, p, noEffect, Options{
		OnError:     func(kafka.Message, string, error) { errs++ },
		OnCommitted: func(kafka.Message, string, inbox.Result) { committed++ },
	}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if errs != 2 || committed != 1 || r.committed() != "[0]" {
		t.Fatalf("%d errors, %d OnCommitted, committed %s; want 2, 1, [0]", errs, committed, r.committed())
	}

	// A closed kafka-go reader ends the loop instead of retrying forever.
	r = &fakeReader{msgs: []kafka.Message{record(1, "b")}, commitErr: func(int) error { return io.ErrClosedPipe }}
	if err := runFake(t, r, p, noEffect, Options{}, 1); !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("error = %v, want io.ErrClosedPipe", err)
	}
}

func TestLoopCommitsWhatItProcessedWhenStopped(t *testing.T) {
	// ctx ends during the effect; the transaction still commits (the fake
	// ignores ctx), so the offset must be committed before Loop
	// returns, not left to be read again.
	r := &fakeReader{msgs: []kafka.Message{record(0, "a")}}
	p := &fakeProcessor{seen: map[string]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	err := Loop(ctx, r, p, func(context.Context, string, kafka.Message) error {
		cancel()
		return nil
	}, Options{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error = %v, want context.Canceled", err)
	}
	if r.committed() != "[0]" {
		t.Fatalf("committed %s, want [0]", r.committed())
	}
}

func mustKgo(t *testing.T, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func TestLoopRejectsInvalidArguments(t *testing.T) {
	p := &fakeProcessor{}
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		r    Reader
		opts Options
	}{
		{"negative backoff", &fakeReader{}, Options{RetryBackoff: -1}},
		{"negative attempts", &fakeReader{}, Options{MaxAttempts: -1}},
		{"no reader", nil, Options{}},
		{"reader without group", kafka.NewReader(kafka.ReaderConfig{Brokers: []string{"127.0.0.1:1"}, Topic: "t"}), Options{}},
		{"kafka-go reader with ReadCommitted", kafka.NewReader(kafka.ReaderConfig{Brokers: []string{"127.0.0.1:1"}, GroupID: "g", Topic: "t",
			IsolationLevel: kafka.ReadCommitted}), Options{ReadCommitted: true}},
		{"read_uncommitted franz-go reader with ReadCommitted", NewFranzReader(mustKgo(t, kgo.SeedBrokers("127.0.0.1:1"))), Options{ReadCommitted: true}},
	} {
		if err := Loop(ctx, tc.r, p, noEffect, tc.opts); !errors.Is(err, inbox.ErrInvalidOptions) {
			t.Errorf("%s: error = %v, want inbox.ErrInvalidOptions", tc.name, err)
		}
		if kr, ok := tc.r.(*kafka.Reader); ok {
			kr.Close()
		}
	}
}
