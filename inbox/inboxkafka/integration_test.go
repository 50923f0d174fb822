package inboxkafka

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/inbox"
	"github.com/walpost/walpost/inbox/internal/inboxtest"
	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/publish/kafka/kafkatest"
)

// The integration tests run Loop with kafka-go consumer-group Readers
// against kfake (an in-process Kafka-protocol broker, over TCP) and the
// inbox in the test cluster of pgtest, with both drivers.

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

// hookView observes the fixture from Loop's hooks, on a connection of
// its own; errors are reported with t.Error (hooks run off the test's
// goroutine) and read as -2.
type hookView struct {
	t    *testing.T
	f    *inboxtest.Fixture
	k    *kafkaFixture
	conn *pgx.Conn
}

func newHookView(t *testing.T, f *inboxtest.Fixture, k *kafkaFixture) *hookView {
	return &hookView{t: t, f: f, k: k, conn: pgtest.Connect(t, f.URL)}
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
	if err := h.conn.QueryRow(context.Background(), `SELECT n FROM `+h.f.Counter).Scan(&n); err != nil {
		h.t.Errorf("reading the effect counter: %v", err)
		return -2
	}
	return n
}

// loopRun runs Loop in the background until stop is called, which
// returns Loop's error.
type loopRun struct {
	cancel context.CancelFunc
	errc   chan error
}

func startLoop(r Reader, p inbox.Processor[inboxtest.Exec], effect func(context.Context, inboxtest.Exec, kafka.Message) error, opts Options) *loopRun {
	ctx, cancel := context.WithCancel(context.Background())
	l := &loopRun{cancel: cancel, errc: make(chan error, 1)}
	go func() { l.errc <- Loop(ctx, r, p, effect, opts) }()
	return l
}

func (l *loopRun) stop(t *testing.T) error {
	t.Helper()
	l.cancel()
	select {
	case err := <-l.errc:
		return err
	case <-time.After(15 * time.Second):
		t.Fatal("Loop did not return within 15s of ctx ending")
		return nil
	}
}

// results counts OnCommitted calls by inbox.Result.
type results struct {
	mu sync.Mutex
	n  map[inbox.Result]int
}

func (r *results) add(_ kafka.Message, _ string, res inbox.Result) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[inbox.Result]int{}
	}
	r.n[res]++
}

func (r *results) get(res inbox.Result) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[res]
}

const integrationWait = 20 * time.Second

// TestIntegrationCommitsTheOffsetOnlyAfterTheDatabaseCommit: while
// the effect's transaction is open the group has no committed offset; once
// the offset is committed, the effect is visible in the database.
func TestIntegrationCommitsTheOffsetOnlyAfterTheDatabaseCommit(t *testing.T) {
	for _, v := range inboxtest.Drivers {
		t.Run(v.Name, func(t *testing.T) {
			f := inboxtest.NewFixture(t)
			ib := f.Open(t, v, inbox.Options{}, 2)
			k := newKafkaFixture(t)
			k.produce(t, "m1")

			h := newHookView(t, f, k)
			var uncommittedInTx, visibleAtOffsetCommit atomic.Int32
			var res results
			l := startLoop(k.reader(t), ib, func(ctx context.Context, exec inboxtest.Exec, m kafka.Message) error {
				if h.committed() == -1 {
					uncommittedInTx.Add(1)
				}
				return f.Increment(exec)
			}, Options{OnCommitted: func(m kafka.Message, id string, r inbox.Result) {
				if id == "m1" && r == inbox.Processed && h.effects() == 1 {
					visibleAtOffsetCommit.Add(1)
				}
				res.add(m, id, r)
			}})
			if !pgtest.WaitFor(integrationWait, func() bool { return res.get(inbox.Processed) == 1 }) {
				t.Fatalf("message not processed and committed within %v (loop error: %v)", integrationWait, l.stop(t))
			}
			if err := l.stop(t); !errors.Is(err, context.Canceled) {
				t.Fatalf("Loop returned %v, want context.Canceled", err)
			}
			if uncommittedInTx.Load() != 1 || visibleAtOffsetCommit.Load() != 1 {
				t.Fatalf("offset uncommitted during the effect: %d, effect visible when the offset was committed: %d; want 1 and 1",
					uncommittedInTx.Load(), visibleAtOffsetCommit.Load())
			}
			if n := f.Effects(t); n != 1 {
				t.Fatalf("%d effects, want 1", n)
			}
			if off := k.committed(t); off != 1 {
				t.Fatalf("committed offset %d, want 1", off)
			}
		})
	}
}

// TestIntegrationRetriesAFailedEffectBeforeCommitting: the effect
// fails twice; the loop retries the same message, commits nothing until
// the third attempt succeeds, and the effect commits once.
func TestIntegrationRetriesAFailedEffectBeforeCommitting(t *testing.T) {
	for _, v := range inboxtest.Drivers {
		t.Run(v.Name, func(t *testing.T) {
			f := inboxtest.NewFixture(t)
			ib := f.Open(t, v, inbox.Options{}, 2)
			k := newKafkaFixture(t)
			k.produce(t, "m1", "m2")

			h := newHookView(t, f, k)
			var attempts atomic.Int32
			var res results
			var mu sync.Mutex
			var afterFailure []string // committed offset and effects after each failure
			l := startLoop(k.reader(t), ib, func(ctx context.Context, exec inboxtest.Exec, m kafka.Message) error {
				if err := f.Increment(exec); err != nil {
					return err
				}
				if m.Offset == 0 && attempts.Add(1) <= 2 {
					return errors.New("downstream not ready")
				}
				return nil
			}, Options{
				RetryBackoff: 50 * time.Millisecond,
				OnError: func(m kafka.Message, id string, err error) {
					mu.Lock()
					defer mu.Unlock()
					afterFailure = append(afterFailure, fmt.Sprintf("%s:offset=%d,effects=%d", id, h.committed(), h.effects()))
				},
				OnCommitted: res.add,
			})
			if !pgtest.WaitFor(integrationWait, func() bool { return res.get(inbox.Processed) == 2 }) {
				t.Fatalf("messages not processed within %v (loop error: %v)", integrationWait, l.stop(t))
			}
			if err := l.stop(t); !errors.Is(err, context.Canceled) {
				t.Fatalf("Loop returned %v, want context.Canceled", err)
			}
			mu.Lock()
			defer mu.Unlock()
			if got, want := fmt.Sprint(afterFailure), "[m1:offset=-1,effects=0 m1:offset=-1,effects=0]"; got != want {
				t.Fatalf("after the failures: %s, want %s (nothing committed anywhere)", got, want)
			}
			if attempts.Load() != 3 || f.Effects(t) != 2 || k.committed(t) != 2 {
				t.Fatalf("%d attempts at m1, %d effects, committed offset %d; want 3, 2, 2", attempts.Load(), f.Effects(t), k.committed(t))
			}
		})
	}
}

// TestIntegrationRunsTheEffectOncePerID: the topic holds the same
// id twice (a relay replay); the effect commits once, and both offsets are
// committed.
func TestIntegrationRunsTheEffectOncePerID(t *testing.T) {
	for _, v := range inboxtest.Drivers {
		t.Run(v.Name, func(t *testing.T) {
			f := inboxtest.NewFixture(t)
			ib := f.Open(t, v, inbox.Options{}, 2)
			k := newKafkaFixture(t)
			k.produce(t, "m1", "m2", "m1")

			var effects atomic.Int32
			var res results
			l := startLoop(k.reader(t), ib, func(ctx context.Context, exec inboxtest.Exec, m kafka.Message) error {
				effects.Add(1)
				return f.Increment(exec)
			}, Options{OnCommitted: res.add})
			if !pgtest.WaitFor(integrationWait, func() bool { return res.get(inbox.Processed)+res.get(inbox.Duplicate) == 3 }) {
				t.Fatalf("messages not committed within %v (loop error: %v)", integrationWait, l.stop(t))
			}
			if err := l.stop(t); !errors.Is(err, context.Canceled) {
				t.Fatalf("Loop returned %v, want context.Canceled", err)
			}
			if res.get(inbox.Processed) != 2 || res.get(inbox.Duplicate) != 1 || effects.Load() != 2 || f.Effects(t) != 2 {
				t.Fatalf("processed %d, duplicate %d, effect called %d times, %d committed; want 2, 1, 2, 2",
					res.get(inbox.Processed), res.get(inbox.Duplicate), effects.Load(), f.Effects(t))
			}
			if off := k.committed(t); off != 3 {
				t.Fatalf("committed offset %d, want 3 (past the duplicate)", off)
			}
		})
	}
}

// TestIntegrationCrashBeforeTheOffsetCommitGivesADuplicate: the
// consumer dies after the database commit but before the offset commit; a
// new Reader in the same group reads the message again, Process reports
// inbox.Duplicate, the effect stays at one, and the offset is committed.
func TestIntegrationCrashBeforeTheOffsetCommitGivesADuplicate(t *testing.T) {
	for _, v := range inboxtest.Drivers {
		t.Run(v.Name, func(t *testing.T) {
			f := inboxtest.NewFixture(t)
			ib := f.Open(t, v, inbox.Options{}, 2)
			k := newKafkaFixture(t)
			k.produce(t, "m1")
			effect := func(ctx context.Context, exec inboxtest.Exec, m kafka.Message) error { return f.Increment(exec) }

			crash := errors.New("crashed before the offset commit")
			r1 := k.reader(t)
			l := startLoop(r1, ib, effect, Options{beforeCommit: func(kafka.Message) error { return crash }})
			select {
			case err := <-l.errc:
				if !errors.Is(err, crash) {
					t.Fatalf("first Loop returned %v, want the crash", err)
				}
			case <-time.After(integrationWait):
				t.Fatalf("first Loop did not reach the offset commit within %v", integrationWait)
			}
			r1.Close() // the process is gone
			if n, off := f.Effects(t), k.committed(t); n != 1 || off != -1 {
				t.Fatalf("after the crash: %d effects, committed offset %d; want 1 and none (-1)", n, off)
			}

			var res results
			l = startLoop(k.reader(t), ib, effect, Options{OnCommitted: res.add})
			if !pgtest.WaitFor(integrationWait, func() bool { return res.get(inbox.Duplicate) == 1 }) {
				t.Fatalf("message not read again as a duplicate within %v (loop error: %v)", integrationWait, l.stop(t))
			}
			if err := l.stop(t); !errors.Is(err, context.Canceled) {
				t.Fatalf("Loop returned %v, want context.Canceled", err)
			}
			if n, off := f.Effects(t), k.committed(t); n != 1 || off != 1 || res.get(inbox.Processed) != 0 {
				t.Fatalf("after the restart: %d effects, committed offset %d, %d processed; want 1, 1, 0", n, off, res.get(inbox.Processed))
			}
		})
	}
}

// TestIntegrationStopsAtARecordWithoutAnID: with kafka-go and the
// default policy, a record without an id header stops the loop and its
// offset stays uncommitted; the record before it is committed.
func TestIntegrationStopsAtARecordWithoutAnID(t *testing.T) {
	f := inboxtest.NewFixture(t)
	ib := f.Open(t, inboxtest.Drivers[0], inbox.Options{}, 2)
	k := newKafkaFixture(t)
	k.produce(t, "m1", "", "m3")
	l := startLoop(k.reader(t), ib, func(ctx context.Context, exec inboxtest.Exec, m kafka.Message) error {
		return f.Increment(exec)
	}, Options{})
	select {
	case err := <-l.errc:
		if !errors.Is(err, inbox.ErrEmptyID) {
			t.Fatalf("Loop returned %v, want inbox.ErrEmptyID", err)
		}
	case <-time.After(integrationWait):
		t.Fatalf("Loop did not stop at the record without an id within %v", integrationWait)
	}
	if n, off := f.Effects(t), k.committed(t); n != 1 || off != 1 {
		t.Fatalf("%d effects, committed offset %d; want 1 and 1 (up to the record without an id)", n, off)
	}
}

// TestIntegrationPanickingEffectIsRetriedLikeAFailingOne: the effect
// changes the database and panics on the first attempt; Process rolls it
// back and reports inbox.ErrPanicked, the loop retries the record in
// place, and the effect commits once before the offset.
func TestIntegrationPanickingEffectIsRetriedLikeAFailingOne(t *testing.T) {
	for _, v := range inboxtest.Drivers {
		t.Run(v.Name, func(t *testing.T) {
			f := inboxtest.NewFixture(t)
			ib := f.Open(t, v, inbox.Options{}, 1)
			k := newKafkaFixture(t)
			k.produce(t, "m1")

			var attempts atomic.Int32
			var res results
			var mu sync.Mutex
			var reported []error
			l := startLoop(k.reader(t), ib, func(ctx context.Context, exec inboxtest.Exec, m kafka.Message) error {
				if err := f.Increment(exec); err != nil {
					return err
				}
				if attempts.Add(1) == 1 {
					panic("effect bug")
				}
				return nil
			}, Options{RetryBackoff: 50 * time.Millisecond, MaxAttempts: 2, OnCommitted: res.add,
				OnError: func(m kafka.Message, id string, err error) {
					mu.Lock()
					defer mu.Unlock()
					reported = append(reported, err)
				}})
			if !pgtest.WaitFor(integrationWait, func() bool { return res.get(inbox.Processed) == 1 }) {
				t.Fatalf("message not processed within %v (loop error: %v)", integrationWait, l.stop(t))
			}
			if err := l.stop(t); !errors.Is(err, context.Canceled) {
				t.Fatalf("Loop returned %v, want context.Canceled", err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(reported) != 1 || !errors.Is(reported[0], inbox.ErrPanicked) {
				t.Fatalf("OnError got %v, want one error wrapping inbox.ErrPanicked", reported)
			}
			if n, off := f.Effects(t), k.committed(t); attempts.Load() != 2 || n != 1 || off != 1 {
				t.Fatalf("%d attempts, %d effects, committed offset %d; want 2, 1, 1", attempts.Load(), n, off)
			}
		})
	}
}

// TestIntegrationReadCommittedSeesAnAbortedBatchNot: records of an
// aborted transaction (a batch of a walpost kafka sink with exactly_once
// that the relay then sent again) and transaction markers are not read by
// a FranzReader that reads committed: each message is processed once,
// with no Duplicate, and the offset is committed past the last marker.
func TestIntegrationReadCommittedSeesAnAbortedBatchNot(t *testing.T) {
	v := inboxtest.Drivers[0]
	f := inboxtest.NewFixture(t)
	ib := f.Open(t, v, inbox.Options{}, 2)
	k := newKafkaFixture(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.kc.Addrs()...), kgo.DefaultProduceTopic(k.topic), kgo.TransactionalID(pgtest.Name(t, "txn")))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	txn := func(commit kgo.TransactionEndTry, ids ...string) {
		t.Helper()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			r := &kgo.Record{Key: []byte("k"), Value: []byte(`{}`), Headers: []kgo.RecordHeader{{Key: "id", Value: []byte(id)}}}
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := cl.EndTransaction(ctx, commit); err != nil {
			t.Fatal(err)
		}
	}
	txn(kgo.TryCommit, "m1", "m2")
	txn(kgo.TryAbort, "m3", "m4")  // the batch whose commit failed
	txn(kgo.TryCommit, "m3", "m4") // sent again

	consumer, err := kgo.NewClient(kgo.SeedBrokers(k.kc.Addrs()...), kgo.ConsumerGroup(k.group), kgo.ConsumeTopics(k.topic),
		kgo.DisableAutoCommit(), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	r := NewFranzReader(consumer)
	var res results
	l := startLoop(r, ib, func(ctx context.Context, exec inboxtest.Exec, m kafka.Message) error {
		return f.Increment(exec)
	}, Options{ReadCommitted: true, OnCommitted: res.add})
	if !pgtest.WaitFor(integrationWait, func() bool { return res.get(inbox.Processed) == 4 }) {
		t.Fatalf("messages not processed within %v (loop error: %v)", integrationWait, l.stop(t))
	}
	l.stop(t)
	consumer.Close()
	if res.get(inbox.Duplicate) != 0 || f.Effects(t) != 4 {
		t.Fatalf("duplicates %d, effects %d; want 0 and 4", res.get(inbox.Duplicate), f.Effects(t))
	}
}

// TestIntegrationClaimCheckHandsTheEffectThePayload: with
// Options.ClaimCheck, the effect of a claim-checked record (empty value,
// the walpost-claim-check headers) gets the fetched payload as its Value.
func TestIntegrationClaimCheckHandsTheEffectThePayload(t *testing.T) {
	t.Parallel()
	f := inboxtest.NewFixture(t)
	ib := f.Open(t, inboxtest.Drivers[0], inbox.Options{}, 2)
	k := newKafkaFixture(t)
	claim := inboxtest.NewClaim(100 << 10)
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.kc.Addrs()...), kgo.DefaultProduceTopic(k.topic))
	if err != nil {
		t.Fatal(err)
	}
	r := &kgo.Record{Key: []byte("k"), Value: []byte{}, Headers: []kgo.RecordHeader{{Key: "id", Value: []byte("big")}}}
	for name, v := range claim.Headers {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: name, Value: []byte(v)})
	}
	err = cl.ProduceSync(context.Background(), r).FirstErr()
	cl.Close()
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan []byte, 1)
	l := startLoop(k.reader(t), inbox.Processor[inboxtest.Exec](ib), func(ctx context.Context, exec inboxtest.Exec, m kafka.Message) error {
		select {
		case got <- m.Value:
		default:
		}
		return f.Increment(exec)
	}, Options{ClaimCheck: inbox.WithClaimCheck(claim.Fetcher)})
	defer l.stop(t)
	select {
	case v := <-got:
		if string(v) != string(claim.Payload) {
			t.Fatalf("the effect got %d bytes, not the payload", len(v))
		}
	case <-time.After(integrationWait):
		t.Fatal("the effect did not run")
	}
}
