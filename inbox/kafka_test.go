package inbox

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
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/internal/pgtest"
	kafkasink "github.com/walpost/walpost/internal/publish/kafka"
	"github.com/walpost/walpost/internal/publish/kafka/kafkatest"
)

// Both inboxes fit KafkaLoop as they are, the transaction type inferred
// from the effect.
var (
	_ = func(ctx context.Context, r *kafka.Reader, ib *Inbox) error {
		return KafkaLoop(ctx, r, ib, func(context.Context, pgx.Tx, kafka.Message) error { return nil }, KafkaOptions{})
	}
	_ = func(ctx context.Context, r *kafka.Reader, ib *SQLInbox) error {
		return KafkaLoop(ctx, r, ib, func(context.Context, *sql.Tx, kafka.Message) error { return nil }, KafkaOptions{})
	}
)

func TestKafkaIDHeaderIsTheSinksHeader(t *testing.T) {
	if DefaultKafkaIDHeader != kafkasink.HeaderID {
		t.Fatalf("DefaultKafkaIDHeader %q, but the kafka sink puts the id in header %q", DefaultKafkaIDHeader, kafkasink.HeaderID)
	}
}

// fakeKafkaReader serves msgs in order, then blocks until ctx ends. commitErr,
// when set, decides the outcome of each commit.
type fakeKafkaReader struct {
	mu        sync.Mutex
	msgs      []kafka.Message
	commits   []int64 // offsets committed, in order
	commitErr func(call int) error
	calls     int
}

func (r *fakeKafkaReader) FetchMessage(ctx context.Context) (kafka.Message, error) {
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

func (r *fakeKafkaReader) CommitMessages(ctx context.Context, msgs ...kafka.Message) error {
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

func (r *fakeKafkaReader) committed() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return fmt.Sprint(r.commits)
}

// fakeKafkaProcessor records ids in memory; its "transaction" is the id.
// beginErr, when set, fails an attempt before the effect runs, as a
// database that cannot begin would.
type fakeKafkaProcessor struct {
	seen     map[string]bool
	beginErr func() error
}

func (p *fakeKafkaProcessor) Process(ctx context.Context, id string, effect func(ctx context.Context, tx string) error) (Result, error) {
	if p.beginErr != nil {
		if err := p.beginErr(); err != nil {
			return 0, err
		}
	}
	if p.seen[id] {
		return Duplicate, nil
	}
	if err := effect(ctx, id); err != nil {
		return 0, err
	}
	p.seen[id] = true
	return Processed, nil
}

func kafkaMsg(offset int64, id string) kafka.Message {
	m := kafka.Message{Topic: "t", Partition: 0, Offset: offset}
	if id != "" {
		m.Headers = []kafka.Header{{Key: "type", Value: []byte("x")}, {Key: DefaultKafkaIDHeader, Value: []byte(id)}}
	}
	return m
}

// runFakeKafka runs KafkaLoop over r until the n-th message was committed or
// the loop returns, and returns the loop's error (nil if it was still
// running and had to be stopped).
func runFakeKafka(t *testing.T, r *fakeKafkaReader, p *fakeKafkaProcessor, effect func(context.Context, string, kafka.Message) error, opts KafkaOptions, n int) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var done atomic.Int32
	user := opts.OnCommitted
	opts.OnCommitted = func(m kafka.Message, id string, res Result) {
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
	go func() { errc <- KafkaLoop(ctx, r, p, effect, opts) }()
	select {
	case err := <-errc:
		if errors.Is(err, context.Canceled) && int(done.Load()) == n {
			return nil
		}
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("KafkaLoop did not finish in 10s")
		return nil
	}
}

func kafkaNoEffect(context.Context, string, kafka.Message) error { return nil }

func TestKafkaLoopStopsAtARecordWithoutAnIDByDefault(t *testing.T) {
	r := &fakeKafkaReader{msgs: []kafka.Message{kafkaMsg(0, "a"), kafkaMsg(1, ""), kafkaMsg(2, "c")}}
	p := &fakeKafkaProcessor{seen: map[string]bool{}}
	err := runFakeKafka(t, r, p, kafkaNoEffect, KafkaOptions{}, 3)
	if !errors.Is(err, ErrKafkaNoID) || !strings.Contains(err.Error(), "t[0]@1") {
		t.Fatalf("error = %v, want ErrKafkaNoID naming record t[0]@1", err)
	}
	if got := r.committed(); got != "[0]" {
		t.Fatalf("committed offsets %s, want [0]: nothing at or past the record without an id", got)
	}
	if p.seen["c"] {
		t.Fatal("the message after the poison one was processed")
	}
}

func TestKafkaLoopSkipsAPoisonRecordOnlyWhenOnPoisonSaysSo(t *testing.T) {
	r := &fakeKafkaReader{msgs: []kafka.Message{kafkaMsg(0, ""), kafkaMsg(1, "b")}}
	p := &fakeKafkaProcessor{seen: map[string]bool{}}
	var poisoned []string
	err := runFakeKafka(t, r, p, kafkaNoEffect, KafkaOptions{OnPoison: func(ctx context.Context, m kafka.Message, err error) error {
		if !errors.Is(err, ErrKafkaNoID) {
			t.Errorf("OnPoison got %v, want ErrKafkaNoID", err)
		}
		poisoned = append(poisoned, kafkaWhere(m))
		return nil
	}}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(poisoned) != "[record t[0]@0]" || r.committed() != "[0 1]" || !p.seen["b"] {
		t.Fatalf("poisoned %v, committed %s, b processed %v; want the poison record logged and committed, b processed", poisoned, r.committed(), p.seen["b"])
	}

	// OnPoison returning an error stops the loop with it, uncommitted.
	r = &fakeKafkaReader{msgs: []kafka.Message{kafkaMsg(0, "")}}
	stop := errors.New("stop here")
	err = runFakeKafka(t, r, p, kafkaNoEffect, KafkaOptions{OnPoison: func(context.Context, kafka.Message, error) error { return stop }}, 1)
	if !errors.Is(err, stop) || r.committed() != "[]" {
		t.Fatalf("error %v, committed %s; want OnPoison's error and no commit", err, r.committed())
	}
}

func TestKafkaLoopReadsTheLastIDHeaderOfTheConfiguredName(t *testing.T) {
	m := kafka.Message{Headers: []kafka.Header{{Key: "Message-Id", Value: []byte("first")}, {Key: "id", Value: []byte("other")}, {Key: "Message-Id", Value: []byte(" last ")}}}
	r := &fakeKafkaReader{msgs: []kafka.Message{m}}
	p := &fakeKafkaProcessor{seen: map[string]bool{}}
	if err := runFakeKafka(t, r, p, kafkaNoEffect, KafkaOptions{IDHeader: "Message-Id"}, 1); err != nil {
		t.Fatal(err)
	}
	if !p.seen["last"] || len(p.seen) != 1 {
		t.Fatalf("processed ids %v, want only %q", p.seen, "last")
	}
}

func TestKafkaLoopRetriesAFailingEffectInPlaceBeforeCommitting(t *testing.T) {
	r := &fakeKafkaReader{msgs: []kafka.Message{kafkaMsg(0, "a"), kafkaMsg(1, "b")}}
	p := &fakeKafkaProcessor{seen: map[string]bool{}}
	attempts := 0
	var reported []string
	err := runFakeKafka(t, r, p, func(_ context.Context, id string, m kafka.Message) error {
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
	}, KafkaOptions{OnError: func(m kafka.Message, id string, err error) {
		reported = append(reported, id)
	}}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if attempts != 4 || fmt.Sprint(reported) != "[a a a]" || r.committed() != "[0 1]" {
		t.Fatalf("attempts %d, errors reported for %v, committed %s; want 4, [a a a], [0 1]", attempts, reported, r.committed())
	}
}

func TestKafkaLoopCountsOnlyEffectFailuresTowardsMaxAttempts(t *testing.T) {
	// The database fails twice before the effect runs: not the message's
	// fault, so MaxAttempts 2 does not give up on it.
	r := &fakeKafkaReader{msgs: []kafka.Message{kafkaMsg(0, "a")}}
	dbDown := 2
	p := &fakeKafkaProcessor{seen: map[string]bool{}, beginErr: func() error {
		if dbDown > 0 {
			dbDown--
			return errors.New("connection refused")
		}
		return nil
	}}
	if err := runFakeKafka(t, r, p, kafkaNoEffect, KafkaOptions{MaxAttempts: 2}, 1); err != nil {
		t.Fatal(err)
	}
	if !p.seen["a"] || r.committed() != "[0]" {
		t.Fatalf("processed %v, committed %s", p.seen, r.committed())
	}

	// The effect fails twice: poison. By default the loop stops, uncommitted.
	boom := errors.New("bad payload")
	failing := func(context.Context, string, kafka.Message) error { return boom }
	r = &fakeKafkaReader{msgs: []kafka.Message{kafkaMsg(0, "x")}}
	err := runFakeKafka(t, r, p, failing, KafkaOptions{MaxAttempts: 2}, 1)
	if !errors.Is(err, ErrKafkaTooManyAttempts) || !errors.Is(err, boom) || r.committed() != "[]" {
		t.Fatalf("error %v, committed %s; want ErrKafkaTooManyAttempts wrapping the effect's error, nothing committed", err, r.committed())
	}

	// With OnPoison returning nil, it is committed past, and the next
	// message is processed.
	r = &fakeKafkaReader{msgs: []kafka.Message{kafkaMsg(0, "x"), kafkaMsg(1, "y")}}
	var parked []error
	err = runFakeKafka(t, r, p, func(ctx context.Context, id string, m kafka.Message) error {
		if id == "x" {
			return boom
		}
		return nil
	}, KafkaOptions{MaxAttempts: 2, OnPoison: func(ctx context.Context, m kafka.Message, err error) error {
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

func TestKafkaLoopRetriesAFailedOffsetCommit(t *testing.T) {
	r := &fakeKafkaReader{msgs: []kafka.Message{kafkaMsg(0, "a")}, commitErr: func(call int) error {
		if call <= 2 {
			return errors.New("coordinator not available")
		}
		return nil
	}}
	p := &fakeKafkaProcessor{seen: map[string]bool{}}
	var errs, committed int
	err := runFakeKafka(t, r, p, kafkaNoEffect, KafkaOptions{
		OnError:     func(kafka.Message, string, error) { errs++ },
		OnCommitted: func(kafka.Message, string, Result) { committed++ },
	}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if errs != 2 || committed != 1 || r.committed() != "[0]" {
		t.Fatalf("%d errors, %d OnCommitted, committed %s; want 2, 1, [0]", errs, committed, r.committed())
	}

	// A closed kafka-go reader ends the loop instead of retrying forever.
	r = &fakeKafkaReader{msgs: []kafka.Message{kafkaMsg(1, "b")}, commitErr: func(int) error { return io.ErrClosedPipe }}
	if err := runFakeKafka(t, r, p, kafkaNoEffect, KafkaOptions{}, 1); !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("error = %v, want io.ErrClosedPipe", err)
	}
}

func TestKafkaLoopCommitsWhatItProcessedWhenStopped(t *testing.T) {
	// ctx ends during the effect; the transaction still commits (the fake
	// ignores ctx), so the offset must be committed before KafkaLoop
	// returns, not left to be read again.
	r := &fakeKafkaReader{msgs: []kafka.Message{kafkaMsg(0, "a")}}
	p := &fakeKafkaProcessor{seen: map[string]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	err := KafkaLoop(ctx, r, p, func(context.Context, string, kafka.Message) error {
		cancel()
		return nil
	}, KafkaOptions{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error = %v, want context.Canceled", err)
	}
	if r.committed() != "[0]" {
		t.Fatalf("committed %s, want [0]", r.committed())
	}
}

func TestKafkaLoopRejectsInvalidArguments(t *testing.T) {
	p := &fakeKafkaProcessor{}
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		r    KafkaReader
		opts KafkaOptions
	}{
		{"negative backoff", &fakeKafkaReader{}, KafkaOptions{RetryBackoff: -1}},
		{"negative attempts", &fakeKafkaReader{}, KafkaOptions{MaxAttempts: -1}},
		{"no reader", nil, KafkaOptions{}},
		{"reader without group", kafka.NewReader(kafka.ReaderConfig{Brokers: []string{"127.0.0.1:1"}, Topic: "t"}), KafkaOptions{}},
	} {
		if err := KafkaLoop(ctx, tc.r, p, kafkaNoEffect, tc.opts); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("%s: error = %v, want ErrInvalidOptions", tc.name, err)
		}
		if kr, ok := tc.r.(*kafka.Reader); ok {
			kr.Close()
		}
	}
}

func TestKafkaBackoffDoublesUpToTheLimit(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := sleepBackoff(ctx, 1, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("sleepBackoff with an ended ctx = %v", err)
	}
	for _, tc := range []struct {
		attempt int
		limit   time.Duration
		max     time.Duration
	}{{1, time.Hour, 100 * time.Millisecond}, {3, time.Hour, 400 * time.Millisecond}, {5, 250 * time.Millisecond, 250 * time.Millisecond}, {1000, 20 * time.Millisecond, 20 * time.Millisecond}} {
		start := time.Now()
		if err := sleepBackoff(context.Background(), tc.attempt, tc.limit); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d < tc.max*4/5 || d > tc.max+500*time.Millisecond {
			t.Errorf("attempt %d, limit %v: slept %v, want within [%v, %v]", tc.attempt, tc.limit, d, tc.max*4/5, tc.max)
		}
	}
}

// The integration tests below run KafkaLoop with kafka-go consumer-group
// Readers against kfake and the inbox in PostgreSQL, for both drivers.

// kafkaExecProcessor lets the driver-agnostic testInbox serve as a KafkaLoop
// Processor whose transaction is an execFunc.
type kafkaExecProcessor struct{ ib testInbox }

func (p kafkaExecProcessor) Process(ctx context.Context, id string, effect func(context.Context, execFunc) error) (Result, error) {
	return p.ib.process(ctx, id, effect)
}

// kafkaFixture is a test's own kfake cluster, topic (one partition) and
// consumer group.
type kafkaFixture struct {
	kc    *kafkatest.Cluster
	topic string
	group string
}

func newKafkaFixture(t *testing.T) *kafkaFixture {
	t.Helper()
	k := &kafkaFixture{topic: "inbox-test", group: pgtest.Name(t, "group")}
	k.kc = kafkatest.Start(t, kfake.SeedTopics(1, k.topic))
	return k
}

// produce writes one record per id ("" writes one without an id header).
func (k *kafkaFixture) produce(t *testing.T, ids ...string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.kc.Addrs()...), kgo.DefaultProduceTopic(k.topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i, id := range ids {
		r := &kgo.Record{Key: []byte("k"), Value: fmt.Appendf(nil, `{"n":%d}`, i)}
		if id != "" {
			r.Headers = []kgo.RecordHeader{{Key: "id", Value: []byte(id)}, {Key: "type", Value: []byte("t")}}
		}
		if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// reader returns a consumer-group Reader of the fixture's topic and group.
func (k *kafkaFixture) reader(t *testing.T) *kafka.Reader {
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: k.kc.Addrs(),
		GroupID: k.group,
		Topic:   k.topic,
		MaxWait: 100 * time.Millisecond,
	})
	t.Cleanup(func() { r.Close() })
	return r
}

// committed returns the group's committed offset of partition 0, -1 for
// none.
func (k *kafkaFixture) committed(t *testing.T) int64 {
	t.Helper()
	off, err := k.committedOffset()
	if err != nil {
		t.Fatal(err)
	}
	return off
}

// committedOffset is committed for hooks, which run off the test's
// goroutine and must not call t.Fatal.
func (k *kafkaFixture) committedOffset() (int64, error) {
	cl := &kafka.Client{Addr: kafka.TCP(k.kc.Addrs()...), Timeout: 5 * time.Second}
	resp, err := cl.OffsetFetch(context.Background(), &kafka.OffsetFetchRequest{GroupID: k.group, Topics: map[string][]int{k.topic: {0}}})
	if err != nil {
		return 0, err
	}
	if resp.Error != nil {
		return 0, resp.Error
	}
	for _, p := range resp.Topics[k.topic] {
		return p.CommittedOffset, p.Error
	}
	return -1, nil
}

// hookView observes the fixture from KafkaLoop's hooks, on a connection of
// its own; errors are reported with t.Error (hooks run off the test's
// goroutine) and read as -2.
type hookView struct {
	t    *testing.T
	f    *fixture
	k    *kafkaFixture
	conn *pgx.Conn
}

func newHookView(t *testing.T, f *fixture, k *kafkaFixture) *hookView {
	return &hookView{t: t, f: f, k: k, conn: pgtest.Connect(t, f.url)}
}

func (h *hookView) committed() int64 {
	off, err := h.k.committedOffset()
	if err != nil {
		h.t.Errorf("reading the committed offset: %v", err)
		return -2
	}
	return off
}

func (h *hookView) effects() int {
	var n int
	if err := h.conn.QueryRow(context.Background(), `SELECT n FROM `+h.f.counter).Scan(&n); err != nil {
		h.t.Errorf("reading the effect counter: %v", err)
		return -2
	}
	return n
}

// kafkaLoopRun runs KafkaLoop in the background until stop is called, which
// returns KafkaLoop's error.
type kafkaLoopRun struct {
	cancel context.CancelFunc
	errc   chan error
}

func startKafkaLoop(r KafkaReader, p Processor[execFunc], effect func(context.Context, execFunc, kafka.Message) error, opts KafkaOptions) *kafkaLoopRun {
	ctx, cancel := context.WithCancel(context.Background())
	l := &kafkaLoopRun{cancel: cancel, errc: make(chan error, 1)}
	go func() { l.errc <- KafkaLoop(ctx, r, p, effect, opts) }()
	return l
}

func (l *kafkaLoopRun) stop(t *testing.T) error {
	t.Helper()
	l.cancel()
	select {
	case err := <-l.errc:
		return err
	case <-time.After(15 * time.Second):
		t.Fatal("KafkaLoop did not return within 15s of ctx ending")
		return nil
	}
}

// kafkaResults counts OnCommitted calls by Result.
type kafkaResults struct {
	mu sync.Mutex
	n  map[Result]int
}

func (r *kafkaResults) add(_ kafka.Message, _ string, res Result) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[Result]int{}
	}
	r.n[res]++
}

func (r *kafkaResults) get(res Result) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[res]
}

const kafkaWait = 20 * time.Second

// TestIntegrationKafkaLoopCommitsTheOffsetOnlyAfterTheDatabaseCommit: while
// the effect's transaction is open the group has no committed offset; once
// the offset is committed, the effect is visible in the database.
func TestIntegrationKafkaLoopCommitsTheOffsetOnlyAfterTheDatabaseCommit(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			f := newFixture(t)
			ib := f.open(t, v, Options{}, 2)
			k := newKafkaFixture(t)
			k.produce(t, "m1")

			h := newHookView(t, f, k)
			var uncommittedInTx, visibleAtOffsetCommit atomic.Int32
			var res kafkaResults
			l := startKafkaLoop(k.reader(t), kafkaExecProcessor{ib}, func(ctx context.Context, exec execFunc, m kafka.Message) error {
				if h.committed() == -1 {
					uncommittedInTx.Add(1)
				}
				return f.increment(exec)
			}, KafkaOptions{OnCommitted: func(m kafka.Message, id string, r Result) {
				if id == "m1" && r == Processed && h.effects() == 1 {
					visibleAtOffsetCommit.Add(1)
				}
				res.add(m, id, r)
			}})
			if !pgtest.WaitFor(kafkaWait, func() bool { return res.get(Processed) == 1 }) {
				t.Fatalf("message not processed and committed within %v (loop error: %v)", kafkaWait, l.stop(t))
			}
			if err := l.stop(t); !errors.Is(err, context.Canceled) {
				t.Fatalf("KafkaLoop returned %v, want context.Canceled", err)
			}
			if uncommittedInTx.Load() != 1 || visibleAtOffsetCommit.Load() != 1 {
				t.Fatalf("offset uncommitted during the effect: %d, effect visible when the offset was committed: %d; want 1 and 1",
					uncommittedInTx.Load(), visibleAtOffsetCommit.Load())
			}
			if n := f.effects(t); n != 1 {
				t.Fatalf("%d effects, want 1", n)
			}
			if off := k.committed(t); off != 1 {
				t.Fatalf("committed offset %d, want 1", off)
			}
		})
	}
}

// TestIntegrationKafkaLoopRetriesAFailedEffectBeforeCommitting: the effect
// fails twice; the loop retries the same message, commits nothing until
// the third attempt succeeds, and the effect commits once.
func TestIntegrationKafkaLoopRetriesAFailedEffectBeforeCommitting(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			f := newFixture(t)
			ib := f.open(t, v, Options{}, 2)
			k := newKafkaFixture(t)
			k.produce(t, "m1", "m2")

			h := newHookView(t, f, k)
			var attempts atomic.Int32
			var res kafkaResults
			var mu sync.Mutex
			var afterFailure []string // committed offset and effects after each failure
			l := startKafkaLoop(k.reader(t), kafkaExecProcessor{ib}, func(ctx context.Context, exec execFunc, m kafka.Message) error {
				if err := f.increment(exec); err != nil {
					return err
				}
				if m.Offset == 0 && attempts.Add(1) <= 2 {
					return errors.New("downstream not ready")
				}
				return nil
			}, KafkaOptions{
				RetryBackoff: 50 * time.Millisecond,
				OnError: func(m kafka.Message, id string, err error) {
					mu.Lock()
					defer mu.Unlock()
					afterFailure = append(afterFailure, fmt.Sprintf("%s:offset=%d,effects=%d", id, h.committed(), h.effects()))
				},
				OnCommitted: res.add,
			})
			if !pgtest.WaitFor(kafkaWait, func() bool { return res.get(Processed) == 2 }) {
				t.Fatalf("messages not processed within %v (loop error: %v)", kafkaWait, l.stop(t))
			}
			if err := l.stop(t); !errors.Is(err, context.Canceled) {
				t.Fatalf("KafkaLoop returned %v, want context.Canceled", err)
			}
			mu.Lock()
			defer mu.Unlock()
			if got, want := fmt.Sprint(afterFailure), "[m1:offset=-1,effects=0 m1:offset=-1,effects=0]"; got != want {
				t.Fatalf("after the failures: %s, want %s (nothing committed anywhere)", got, want)
			}
			if attempts.Load() != 3 || f.effects(t) != 2 || k.committed(t) != 2 {
				t.Fatalf("%d attempts at m1, %d effects, committed offset %d; want 3, 2, 2", attempts.Load(), f.effects(t), k.committed(t))
			}
		})
	}
}

// TestIntegrationKafkaLoopRunsTheEffectOncePerID: the topic holds the same
// id twice (a relay replay); the effect commits once, and both offsets are
// committed.
func TestIntegrationKafkaLoopRunsTheEffectOncePerID(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			f := newFixture(t)
			ib := f.open(t, v, Options{}, 2)
			k := newKafkaFixture(t)
			k.produce(t, "m1", "m2", "m1")

			var effects atomic.Int32
			var res kafkaResults
			l := startKafkaLoop(k.reader(t), kafkaExecProcessor{ib}, func(ctx context.Context, exec execFunc, m kafka.Message) error {
				effects.Add(1)
				return f.increment(exec)
			}, KafkaOptions{OnCommitted: res.add})
			if !pgtest.WaitFor(kafkaWait, func() bool { return res.get(Processed)+res.get(Duplicate) == 3 }) {
				t.Fatalf("messages not committed within %v (loop error: %v)", kafkaWait, l.stop(t))
			}
			if err := l.stop(t); !errors.Is(err, context.Canceled) {
				t.Fatalf("KafkaLoop returned %v, want context.Canceled", err)
			}
			if res.get(Processed) != 2 || res.get(Duplicate) != 1 || effects.Load() != 2 || f.effects(t) != 2 {
				t.Fatalf("processed %d, duplicate %d, effect called %d times, %d committed; want 2, 1, 2, 2",
					res.get(Processed), res.get(Duplicate), effects.Load(), f.effects(t))
			}
			if off := k.committed(t); off != 3 {
				t.Fatalf("committed offset %d, want 3 (past the duplicate)", off)
			}
		})
	}
}

// TestIntegrationKafkaLoopCrashBeforeTheOffsetCommitGivesADuplicate: the
// consumer dies after the database commit but before the offset commit; a
// new Reader in the same group reads the message again, Process reports
// Duplicate, the effect stays at one, and the offset is committed.
func TestIntegrationKafkaLoopCrashBeforeTheOffsetCommitGivesADuplicate(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			f := newFixture(t)
			ib := f.open(t, v, Options{}, 2)
			k := newKafkaFixture(t)
			k.produce(t, "m1")
			effect := func(ctx context.Context, exec execFunc, m kafka.Message) error { return f.increment(exec) }

			crash := errors.New("crashed before the offset commit")
			r1 := k.reader(t)
			l := startKafkaLoop(r1, kafkaExecProcessor{ib}, effect, KafkaOptions{beforeCommit: func(kafka.Message) error { return crash }})
			select {
			case err := <-l.errc:
				if !errors.Is(err, crash) {
					t.Fatalf("first KafkaLoop returned %v, want the crash", err)
				}
			case <-time.After(kafkaWait):
				t.Fatalf("first KafkaLoop did not reach the offset commit within %v", kafkaWait)
			}
			r1.Close() // the process is gone
			if n, off := f.effects(t), k.committed(t); n != 1 || off != -1 {
				t.Fatalf("after the crash: %d effects, committed offset %d; want 1 and none (-1)", n, off)
			}

			var res kafkaResults
			l = startKafkaLoop(k.reader(t), kafkaExecProcessor{ib}, effect, KafkaOptions{OnCommitted: res.add})
			if !pgtest.WaitFor(kafkaWait, func() bool { return res.get(Duplicate) == 1 }) {
				t.Fatalf("message not read again as a duplicate within %v (loop error: %v)", kafkaWait, l.stop(t))
			}
			if err := l.stop(t); !errors.Is(err, context.Canceled) {
				t.Fatalf("KafkaLoop returned %v, want context.Canceled", err)
			}
			if n, off := f.effects(t), k.committed(t); n != 1 || off != 1 || res.get(Processed) != 0 {
				t.Fatalf("after the restart: %d effects, committed offset %d, %d processed; want 1, 1, 0", n, off, res.get(Processed))
			}
		})
	}
}

// TestIntegrationKafkaLoopStopsAtARecordWithoutAnID: with kafka-go and the
// default policy, a record without an id header stops the loop and its
// offset stays uncommitted; the record before it is committed.
func TestIntegrationKafkaLoopStopsAtARecordWithoutAnID(t *testing.T) {
	f := newFixture(t)
	ib := f.open(t, variants[0], Options{}, 2)
	k := newKafkaFixture(t)
	k.produce(t, "m1", "", "m3")
	l := startKafkaLoop(k.reader(t), kafkaExecProcessor{ib}, func(ctx context.Context, exec execFunc, m kafka.Message) error {
		return f.increment(exec)
	}, KafkaOptions{})
	select {
	case err := <-l.errc:
		if !errors.Is(err, ErrKafkaNoID) {
			t.Fatalf("KafkaLoop returned %v, want ErrKafkaNoID", err)
		}
	case <-time.After(kafkaWait):
		t.Fatalf("KafkaLoop did not stop at the record without an id within %v", kafkaWait)
	}
	if n, off := f.effects(t), k.committed(t); n != 1 || off != 1 {
		t.Fatalf("%d effects, committed offset %d; want 1 and 1 (up to the record without an id)", n, off)
	}
}
