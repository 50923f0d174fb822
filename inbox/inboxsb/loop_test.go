package inboxsb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/inbox"
	"github.com/walpost/walpost/inbox/internal/inboxtest"
	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/publish/servicebus/sbfake"
)

// The Service Bus tests run against sbfake, the AMQP 1.0 stand-in of the
// servicebus sink's tests (it needs node; without it they skip), and the
// test cluster of pgtest.

// sbQueue is a queue of a fresh stand-in with a sender and a peek-lock
// receiver on it.
type sbQueue struct {
	fake     *sbfake.Broker
	name     string
	sender   *azservicebus.Sender
	receiver *azservicebus.Receiver
}

func newSBQueue(t *testing.T, opts sbfake.QueueOptions) *sbQueue {
	t.Helper()
	q := &sbQueue{fake: sbfake.Start(t), name: "inbox-test"}
	q.fake.CreateQueue(t, q.name, opts)
	c, err := azservicebus.NewClientFromConnectionString(q.fake.ConnectionString(), &azservicebus.ClientOptions{
		RetryOptions: azservicebus.RetryOptions{MaxRetries: 2, RetryDelay: 50 * time.Millisecond, MaxRetryDelay: time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	if q.sender, err = c.NewSender(q.name, nil); err != nil {
		t.Fatal(err)
	}
	if q.receiver, err = c.NewReceiverForQueue(q.name, nil); err != nil {
		t.Fatal(err)
	}
	return q
}

func (q *sbQueue) send(t *testing.T, id, body string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := q.sender.SendMessage(ctx, &azservicebus.Message{MessageID: &id, Body: []byte(body)}, nil); err != nil {
		t.Fatal(err)
	}
}

// recorder wraps a receiver and records the settlements, calling
// onComplete before each Complete goes to the broker.
type recorder struct {
	Receiver
	onComplete func(msg *azservicebus.ReceivedMessage)

	mu        sync.Mutex
	completed []string // message ids, in order
	abandoned []string
	errs      []error // reported through OnError
}

func (r *recorder) CompleteMessage(ctx context.Context, msg *azservicebus.ReceivedMessage, o *azservicebus.CompleteMessageOptions) error {
	if r.onComplete != nil {
		r.onComplete(msg)
	}
	err := r.Receiver.CompleteMessage(ctx, msg, o)
	if err == nil {
		r.mu.Lock()
		r.completed = append(r.completed, msg.MessageID)
		r.mu.Unlock()
	}
	return err
}

func (r *recorder) AbandonMessage(ctx context.Context, msg *azservicebus.ReceivedMessage, o *azservicebus.AbandonMessageOptions) error {
	err := r.Receiver.AbandonMessage(ctx, msg, o)
	if err == nil {
		r.mu.Lock()
		r.abandoned = append(r.abandoned, msg.MessageID)
		r.mu.Unlock()
	}
	return err
}

func (r *recorder) onError(_ *azservicebus.ReceivedMessage, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, err)
}

func (r *recorder) counts() (completed, abandoned, errs int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.completed), len(r.abandoned), len(r.errs)
}

// runLoop runs Loop in the background; stop cancels it and
// returns its error.
func runLoop(t *testing.T, run func(ctx context.Context) error) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				err = errors.New("Loop did not return within 30s of its context ending")
			}
		})
		return err
	}
	t.Cleanup(func() { stop() })
	return stop
}

var sbOpts = Options{TimeAfterFirstMessage: 300 * time.Millisecond}

// TestIntegrationCompletesOnlyAfterTheCommit: the effect
// runs once, its change and the id are committed before Complete is sent,
// and the message is gone from the queue afterwards; with both drivers.
func TestIntegrationCompletesOnlyAfterTheCommit(t *testing.T) {
	for _, v := range inboxtest.Drivers {
		t.Run(v.Name, func(t *testing.T) {
			f := inboxtest.NewFixture(t)
			ib := f.Open(t, v, inbox.Options{}, 4)
			q := newSBQueue(t, sbfake.QueueOptions{})
			const id = "0190b6a4-7a4c-7cc2-9f1e-6f1d3c1f7a10"
			q.send(t, id, `{"n":1}`)

			rec := &recorder{Receiver: q.receiver}
			var atComplete []int
			rec.onComplete = func(msg *azservicebus.ReceivedMessage) {
				atComplete = append(atComplete, f.Effects(t), f.Count(t, "id = $1", msg.MessageID))
			}
			opts := sbOpts
			opts.OnError = rec.onError
			effect := func(ctx context.Context, exec inboxtest.Exec, msg *azservicebus.ReceivedMessage) error {
				if string(msg.Body) != `{"n":1}` {
					return fmt.Errorf("body %q", msg.Body)
				}
				return f.Increment(exec)
			}
			stop := runLoop(t, func(ctx context.Context) error { return loopFor(ctx, ib, rec, effect, opts) })

			pgtest.Await(t, 20*time.Second, "the message to be completed", func() bool { c, _, _ := rec.counts(); return c == 1 })
			if err := stop(); !errors.Is(err, context.Canceled) {
				t.Errorf("loop returned %v, want context.Canceled", err)
			}
			if fmt.Sprint(atComplete) != "[1 1]" {
				t.Errorf("at Complete the database held %v effects and ids, want [1 1]: complete before commit", atComplete)
			}
			if n := f.Effects(t); n != 1 {
				t.Errorf("%d effects committed, want 1", n)
			}
			if st := q.fake.Stats(t, q.name); st.Active+st.Locked != 0 || st.Completed != 1 {
				t.Errorf("queue after the loop: %+v, want it empty after one complete", st)
			}
			if _, _, errs := rec.counts(); errs != 0 {
				t.Errorf("OnError was called: %v", rec.errs)
			}
		})
	}
}

var errBoom = errors.New("effect failed (test)")

// TestIntegrationAbandonsWhenTheEffectFails: the first
// delivery's effect fails after changing the database; that change rolls
// back, the message is abandoned, comes back with delivery count 2 and is
// processed once.
func TestIntegrationAbandonsWhenTheEffectFails(t *testing.T) {
	f := inboxtest.NewFixture(t)
	ib := f.Open(t, inboxtest.Drivers[0], inbox.Options{}, 4)
	q := newSBQueue(t, sbfake.QueueOptions{})
	const id = "0190b6a4-7a4c-7cc2-9f1e-6f1d3c1f7a11"
	q.send(t, id, "x")

	rec := &recorder{Receiver: q.receiver}
	opts := sbOpts
	opts.OnError = rec.onError
	var mu sync.Mutex
	var deliveries []uint32
	effect := func(ctx context.Context, exec inboxtest.Exec, msg *azservicebus.ReceivedMessage) error {
		mu.Lock()
		deliveries = append(deliveries, msg.DeliveryCount)
		mu.Unlock()
		if err := f.Increment(exec); err != nil {
			return err
		}
		if msg.DeliveryCount == 1 {
			return errBoom
		}
		return nil
	}
	stop := runLoop(t, func(ctx context.Context) error { return loopFor(ctx, ib, rec, effect, opts) })
	pgtest.Await(t, 20*time.Second, "the redelivered message to be completed", func() bool { c, _, _ := rec.counts(); return c == 1 })
	stop()

	completed, abandoned, _ := rec.counts()
	if completed != 1 || abandoned != 1 {
		t.Errorf("%d completed and %d abandoned, want 1 and 1", completed, abandoned)
	}
	if fmt.Sprint(deliveries) != "[1 2]" {
		t.Errorf("the effect saw delivery counts %v, want [1 2]", deliveries)
	}
	if n := f.Effects(t); n != 1 {
		t.Errorf("%d effects committed, want 1 (the failed one rolls back)", n)
	}
	if len(rec.errs) != 1 || !errors.Is(rec.errs[0], errBoom) {
		t.Errorf("OnError got %v, want the effect's error once", rec.errs)
	}
	if st := q.fake.Stats(t, q.name); st.Active+st.Locked != 0 || st.Abandoned != 1 {
		t.Errorf("queue after the loop: %+v", st)
	}
}

// TestIntegrationWaitsBeforeAbandoning: while the database fails, a
// message is abandoned only after a wait that doubles with its delivery
// count (up to RetryBackoff), not at once: a second of failures costs a
// handful of deliveries, not the entity's MaxDeliveryCount. Once the
// database is back the message is processed once.
func TestIntegrationWaitsBeforeAbandoning(t *testing.T) {
	f := inboxtest.NewFixture(t)
	ib := f.Open(t, inboxtest.Drivers[0], inbox.Options{}, 4)
	q := newSBQueue(t, sbfake.QueueOptions{})
	q.send(t, "0190b6a4-7a4c-7cc2-9f1e-6f1d3c1f7a15", "x")

	rec := &recorder{Receiver: q.receiver}
	opts := sbOpts
	opts.OnError = rec.onError
	opts.RetryBackoff = 400 * time.Millisecond
	opts.TimeAfterFirstMessage = time.Millisecond // no wait of the receive call's own
	var mu sync.Mutex
	var deliveries []uint32
	down := true
	stop := runLoop(t, func(ctx context.Context) error {
		return loopFor(ctx, ib, rec, func(ctx context.Context, exec inboxtest.Exec, msg *azservicebus.ReceivedMessage) error {
			mu.Lock()
			defer mu.Unlock()
			deliveries = append(deliveries, msg.DeliveryCount)
			if down {
				return errors.New("database unreachable (test)")
			}
			return f.Increment(exec)
		}, opts)
	})
	time.Sleep(1200 * time.Millisecond) // the outage: about 100+200+400+400 ms of waits
	mu.Lock()
	during := len(deliveries)
	down = false
	mu.Unlock()
	pgtest.Await(t, 20*time.Second, "the message to be completed", func() bool { c, _, _ := rec.counts(); return c == 1 })
	stop()
	if during < 2 || during > 6 {
		t.Errorf("%d deliveries during a 1.2s outage, want 2 to 6 (waits of 100ms doubling up to 400ms before each abandon)", during)
	}
	if n := f.Effects(t); n != 1 {
		t.Errorf("%d effects committed, want 1", n)
	}
}

func TestRetryWaitLeavesTheLocksOfTheRestOfTheBatch(t *testing.T) {
	in := func(d time.Duration) *azservicebus.ReceivedMessage {
		u := time.Now().Add(d)
		return &azservicebus.ReceivedMessage{LockedUntil: &u}
	}
	l := &loop[struct{}]{opts: Options{RetryBackoff: 30 * time.Second}}
	if got := l.retryWait([]*azservicebus.ReceivedMessage{in(time.Minute), in(10 * time.Second), {}}); got > 5*time.Second || got < 4*time.Second {
		t.Errorf("retryWait = %v, want about half of the earliest lock's 10s", got)
	}
	if got := l.retryWait([]*azservicebus.ReceivedMessage{{}}); got != 30*time.Second {
		t.Errorf("retryWait without a lock time = %v, want RetryBackoff", got)
	}
	if got := l.retryWait([]*azservicebus.ReceivedMessage{in(-time.Second)}); got <= 0 || got > time.Millisecond {
		t.Errorf("retryWait with the lock expired = %v, want next to nothing", got)
	}
}

// TestIntegrationAbandonsWhenTheEffectPanics: a panicking effect is a
// failing effect: rolled back, the message abandoned (not the loop
// crashed), redelivered and processed once; with both drivers.
func TestIntegrationAbandonsWhenTheEffectPanics(t *testing.T) {
	for _, v := range inboxtest.Drivers {
		t.Run(v.Name, func(t *testing.T) {
			f := inboxtest.NewFixture(t)
			ib := f.Open(t, v, inbox.Options{}, 1)
			q := newSBQueue(t, sbfake.QueueOptions{})
			q.send(t, "0190b6a4-7a4c-7cc2-9f1e-6f1d3c1f7a14", "x")

			rec := &recorder{Receiver: q.receiver}
			opts := sbOpts
			opts.OnError = rec.onError
			stop := runLoop(t, func(ctx context.Context) error {
				return loopFor(ctx, ib, rec, func(ctx context.Context, exec inboxtest.Exec, msg *azservicebus.ReceivedMessage) error {
					if err := f.Increment(exec); err != nil {
						return err
					}
					if msg.DeliveryCount == 1 {
						panic("effect bug")
					}
					return nil
				}, opts)
			})
			pgtest.Await(t, 20*time.Second, "the redelivered message to be completed", func() bool { c, _, _ := rec.counts(); return c == 1 })
			if err := stop(); !errors.Is(err, context.Canceled) {
				t.Errorf("loop returned %v, want context.Canceled", err)
			}
			completed, abandoned, _ := rec.counts()
			if completed != 1 || abandoned != 1 || f.Effects(t) != 1 {
				t.Errorf("%d completed, %d abandoned, %d effects; want 1, 1, 1", completed, abandoned, f.Effects(t))
			}
			if len(rec.errs) != 1 || !errors.Is(rec.errs[0], inbox.ErrPanicked) {
				t.Errorf("OnError got %v, want one error wrapping inbox.ErrPanicked", rec.errs)
			}
		})
	}
}

// TestIntegrationCompletesDuplicatesWithoutRunningTheEffect:
// the same MessageId sent twice (a relay resend outside the duplicate
// detection window) runs the effect once; both copies are completed.
func TestIntegrationCompletesDuplicatesWithoutRunningTheEffect(t *testing.T) {
	f := inboxtest.NewFixture(t)
	ib := f.Open(t, inboxtest.Drivers[1], inbox.Options{}, 4)
	q := newSBQueue(t, sbfake.QueueOptions{})
	const id = "0190b6a4-7a4c-7cc2-9f1e-6f1d3c1f7a12"
	q.send(t, id, "first copy")
	q.send(t, id, "second copy")

	rec := &recorder{Receiver: q.receiver}
	opts := sbOpts
	opts.OnError = rec.onError
	var results []string
	opts.OnCompleted = func(msg *azservicebus.ReceivedMessage, res inbox.Result) {
		results = append(results, string(msg.Body)+": "+res.String())
	}
	stop := runLoop(t, func(ctx context.Context) error {
		return loopFor(ctx, ib, rec, func(ctx context.Context, exec inboxtest.Exec, _ *azservicebus.ReceivedMessage) error {
			return f.Increment(exec)
		}, opts)
	})
	pgtest.Await(t, 20*time.Second, "both copies to be completed", func() bool { c, _, _ := rec.counts(); return c == 2 })
	stop()
	if got := fmt.Sprint(results); got != "[first copy: processed second copy: duplicate]" {
		t.Errorf("OnCompleted saw %s, want the first copy processed and the second a duplicate", got)
	}
	if n := f.Effects(t); n != 1 {
		t.Errorf("%d effects committed for two copies of one message, want 1", n)
	}
	if st := q.fake.Stats(t, q.name); st.Active+st.Locked != 0 || st.Completed != 2 {
		t.Errorf("queue after the loop: %+v, want both copies completed", st)
	}
	if len(rec.errs) != 0 {
		t.Errorf("OnError was called: %v", rec.errs)
	}
}

// TestIntegrationLockLostAfterCommitGivesADuplicate: the
// effect commits, but the lock expires before Complete; Complete fails,
// Service Bus delivers the message again, and the redelivery is a
// inbox.Duplicate that is completed without running the effect again. This is
// why receivers need the inbox although the sender side has duplicate
// detection.
func TestIntegrationLockLostAfterCommitGivesADuplicate(t *testing.T) {
	f := inboxtest.NewFixture(t)
	ib := f.Open(t, inboxtest.Drivers[0], inbox.Options{}, 4)
	q := newSBQueue(t, sbfake.QueueOptions{LockDuration: 400 * time.Millisecond})
	const id = "0190b6a4-7a4c-7cc2-9f1e-6f1d3c1f7a13"
	q.send(t, id, "slow")

	rec := &recorder{Receiver: q.receiver}
	opts := sbOpts
	opts.OnError = rec.onError
	stop := runLoop(t, func(ctx context.Context) error {
		return loopFor(ctx, ib, rec, func(ctx context.Context, exec inboxtest.Exec, msg *azservicebus.ReceivedMessage) error {
			if msg.DeliveryCount == 1 {
				time.Sleep(700 * time.Millisecond) // past the lock
			}
			return f.Increment(exec)
		}, opts)
	})
	pgtest.Await(t, 20*time.Second, "the redelivery to be completed", func() bool { c, _, _ := rec.counts(); return c == 1 })
	stop()
	if n := f.Effects(t); n != 1 {
		t.Errorf("%d effects committed, want 1", n)
	}
	var sbErr *azservicebus.Error
	if len(rec.errs) != 1 || !errors.As(rec.errs[0], &sbErr) || sbErr.Code != azservicebus.CodeLockLost {
		t.Errorf("OnError got %v, want one lock-lost error from the first Complete", rec.errs)
	}
	if st := q.fake.Stats(t, q.name); st.Active+st.Locked != 0 || st.LockLost != 1 || st.Completed != 1 {
		t.Errorf("queue after the loop: %+v", st)
	}
}

// TestIntegrationReturnsWhenReceivingFails: a receiver of a
// queue that does not exist fails for good; the loop returns that error.
func TestIntegrationReturnsWhenReceivingFails(t *testing.T) {
	fake := sbfake.Start(t)
	c, err := azservicebus.NewClientFromConnectionString(fake.ConnectionString(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	r, err := c.NewReceiverForQueue("nowhere", nil)
	if err != nil {
		t.Fatal(err)
	}
	ib, err := inbox.New(nil, inbox.Options{}) // never reached
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = Loop(ctx, r, ib, func(context.Context, pgx.Tx, *azservicebus.ReceivedMessage) error {
		t.Error("effect called")
		return nil
	}, Options{})
	if err == nil || ctx.Err() != nil {
		t.Fatalf("loop returned %v (context: %v), want the receive error before the deadline", err, ctx.Err())
	}
	t.Logf("loop returned: %v", err)
}

// fakeReceiver hands out one batch of messages and records settlements.
type fakeReceiver struct {
	batch     []*azservicebus.ReceivedMessage
	completed []string
	abandoned []string
}

func (r *fakeReceiver) ReceiveMessages(ctx context.Context, _ int, _ *azservicebus.ReceiveMessagesOptions) ([]*azservicebus.ReceivedMessage, error) {
	if b := r.batch; b != nil {
		r.batch = nil
		return b, nil
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

func (r *fakeReceiver) CompleteMessage(ctx context.Context, m *azservicebus.ReceivedMessage, _ *azservicebus.CompleteMessageOptions) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	r.completed = append(r.completed, m.MessageID)
	return nil
}

func (r *fakeReceiver) AbandonMessage(ctx context.Context, m *azservicebus.ReceivedMessage, _ *azservicebus.AbandonMessageOptions) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	r.abandoned = append(r.abandoned, m.MessageID)
	return nil
}

// fakeProcessor runs the effect with no transaction and stops the loop
// after the first message.
type fakeProcessor struct{ stop context.CancelFunc }

func (p fakeProcessor) Process(ctx context.Context, id string, effect func(context.Context, struct{}) error) (inbox.Result, error) {
	if id == "" {
		return 0, inbox.ErrEmptyID
	}
	if err := effect(ctx, struct{}{}); err != nil {
		return 0, err
	}
	p.stop()
	return inbox.Processed, nil
}

// TestLoopSettlesEveryMessageWhenStopped: when the context ends
// mid-batch, the processed message is still completed (settling outlives
// the context) and the rest are abandoned rather than left to their locks;
// a message without a MessageId is abandoned with inbox.ErrEmptyID.
func TestLoopSettlesEveryMessageWhenStopped(t *testing.T) {
	r := &fakeReceiver{batch: []*azservicebus.ReceivedMessage{{MessageID: ""}, {MessageID: "a"}, {MessageID: "b"}, {MessageID: "c"}}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var reported []error
	err := Loop(ctx, r, fakeProcessor{cancel}, func(context.Context, struct{}, *azservicebus.ReceivedMessage) error { return nil },
		Options{OnError: func(_ *azservicebus.ReceivedMessage, err error) { reported = append(reported, err) }})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("loop returned %v, want context.Canceled", err)
	}
	if fmt.Sprint(r.completed) != "[a]" || fmt.Sprint(r.abandoned) != "[ b c]" {
		t.Errorf("completed %q and abandoned %q, want [a] and [\"\" b c]", r.completed, r.abandoned)
	}
	if len(reported) != 1 || !errors.Is(reported[0], inbox.ErrEmptyID) {
		t.Errorf("OnError got %v, want inbox.ErrEmptyID once", reported)
	}
}

func TestLoopRejectsInvalidOptions(t *testing.T) {
	r := &fakeReceiver{}
	p := fakeProcessor{func() {}}
	effect := func(context.Context, struct{}, *azservicebus.ReceivedMessage) error { return nil }
	for _, o := range []Options{{MaxMessages: -1}, {SettleTimeout: -time.Second}, {TimeAfterFirstMessage: -time.Second}, {RetryBackoff: -time.Second}} {
		if err := Loop(context.Background(), r, p, effect, o); !errors.Is(err, inbox.ErrInvalidOptions) {
			t.Errorf("options %+v: %v, want inbox.ErrInvalidOptions", o, err)
		}
	}
	if err := Loop(context.Background(), nil, p, effect, Options{}); !errors.Is(err, inbox.ErrInvalidOptions) {
		t.Errorf("nil receiver: %v, want inbox.ErrInvalidOptions", err)
	}
}

// loopFor runs Loop over the test inbox of either driver, with its own
// transaction type, the effect given a statement runner.
func loopFor(ctx context.Context, ib *inboxtest.Inbox, r Receiver,
	effect func(ctx context.Context, exec inboxtest.Exec, msg *azservicebus.ReceivedMessage) error, opts Options) error {
	if ib.PGX != nil {
		return Loop(ctx, r, ib.PGX, func(ctx context.Context, tx pgx.Tx, msg *azservicebus.ReceivedMessage) error {
			return effect(ctx, func(s string, args ...any) error { _, err := tx.Exec(ctx, s, args...); return err }, msg)
		}, opts)
	}
	return Loop(ctx, r, ib.SQL, func(ctx context.Context, tx *sql.Tx, msg *azservicebus.ReceivedMessage) error {
		return effect(ctx, func(q string, args ...any) error { _, err := tx.ExecContext(ctx, q, args...); return err }, msg)
	}, opts)
}
