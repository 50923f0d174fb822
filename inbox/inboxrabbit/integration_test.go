package inboxrabbit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/inbox"
	"github.com/walpost/walpost/inbox/internal/inboxtest"
	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/publish/claimcheck"
	"github.com/walpost/walpost/internal/publish/rabbitmq"
	"github.com/walpost/walpost/internal/publish/rabbitmq/rabbittest"
	"github.com/walpost/walpost/internal/publish/sinktest"
)

// The integration tests run Loop against the machine's RabbitMQ (a
// per-test exchange and queue, rabbittest) and the inbox in the test
// cluster of pgtest, with both drivers.

// channel opens a connection and channel of its own, closed when the
// test ends (or earlier with the returned close).
func channel(t *testing.T, url string) (*amqp.Channel, func()) {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		t.Fatal(err)
	}
	var once sync.Once
	closeFn := func() { once.Do(func() { conn.Close() }) }
	t.Cleanup(closeFn)
	return ch, closeFn
}

// publishWithSink publishes msgs to the topology's exchange through
// walpost's rabbitmq sink, the way the relay does.
func publishWithSink(t *testing.T, tp *rabbittest.Topology, msgs []*message.Message) {
	t.Helper()
	doc := fmt.Sprintf("name: events\nkind: rabbitmq\nurl: %q\nexchange: %q\n", tp.URL, tp.Exchange)
	s, err := rabbitmq.New(sinktest.SinkConfig(t, doc), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Publish(ctx, msgs); err != nil {
		t.Fatal(err)
	}
}

// run runs Loop in the background until the test ends; wait returns its
// result once it returned.
func run(t *testing.T, ch Channel, queue string, ib *inboxtest.Inbox,
	effect func(ctx context.Context, exec inboxtest.Exec, d amqp.Delivery) error, opts Options) (stop func(), wait func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var err error
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		err = Loop(ctx, ch, queue, inbox.Processor[inboxtest.Exec](ib), effect, opts)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-finished:
		case <-time.After(10 * time.Second):
			t.Error("Loop did not return within 10s of its context ending")
		}
	})
	return cancel, func() error { <-finished; return err }
}

// counter counts calls of OnAcked by result.
type counter struct {
	mu  sync.Mutex
	res map[inbox.Result]int
}

func (c *counter) acked(_ amqp.Delivery, _ string, r inbox.Result) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.res == nil {
		c.res = map[inbox.Result]int{}
	}
	c.res[r]++
}

func (c *counter) get(r inbox.Result) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.res[r]
}

// TestIntegrationEffectOncePerMessageIDAckedAfterCommit: messages published
// by the rabbitmq sink, two of them twice (as after a relay retry), run
// their effect once per outbox id with either driver; every delivery is
// acknowledged after its commit (the copies as duplicates), and the queue
// is left empty.
func TestIntegrationEffectOncePerMessageIDAckedAfterCommit(t *testing.T) {
	url := rabbittest.Start(t)
	for _, d := range inboxtest.Drivers {
		t.Run(d.Name, func(t *testing.T) {
			f := inboxtest.NewFixture(t)
			ib := f.Open(t, d, inbox.Options{}, 4)
			tp := rabbittest.Declare(t, url, rabbittest.Topology{})
			msgs := sinktest.NewGen(1).Interleave(5, "a", "b")
			publishWithSink(t, tp, msgs)
			publishWithSink(t, tp, msgs[1:3])

			ch, _ := channel(t, url)
			var c counter
			var mu sync.Mutex
			seen := map[string]bool{}
			stop, wait := run(t, ch, tp.Queue, ib, func(ctx context.Context, exec inboxtest.Exec, dl amqp.Delivery) error {
				mu.Lock()
				seen[dl.Type] = true
				mu.Unlock()
				return f.Increment(exec)
			}, Options{OnAcked: c.acked})
			pgtest.Await(t, 20*time.Second, "7 deliveries acknowledged", func() bool {
				return c.get(inbox.Processed)+c.get(inbox.Duplicate) >= 7
			})
			if p, dup := c.get(inbox.Processed), c.get(inbox.Duplicate); p != 5 || dup != 2 {
				t.Errorf("processed %d, duplicates %d; want 5 and 2", p, dup)
			}
			if n := f.Effects(t); n != 5 {
				t.Errorf("%d effects committed, want 5", n)
			}
			for _, m := range msgs {
				if f.Count(t, "id = $1", m.ID) != 1 {
					t.Errorf("outbox id %s is not recorded once", m.ID)
				}
			}
			stop()
			if err := wait(); !errors.Is(err, context.Canceled) {
				t.Errorf("Loop returned %v after its context was canceled", err)
			}
			if left := rabbittest.Drain(t, url, tp.Queue); len(left) != 0 {
				t.Errorf("%d messages left in the queue, want none (all acknowledged)", len(left))
			}
		})
	}
}

// TestIntegrationFailingEffectIsRequeuedAfterAGrowingBackoff: a message
// whose effect fails is given back to RabbitMQ (nack with requeue) only
// after a wait that doubles with each failure, so it does not spin; it is
// delivered again and its effect commits once when it succeeds. A message
// behind it is processed meanwhile.
func TestIntegrationFailingEffectIsRequeuedAfterAGrowingBackoff(t *testing.T) {
	url := rabbittest.Start(t)
	f := inboxtest.NewFixture(t)
	ib := f.Open(t, inboxtest.Drivers[0], inbox.Options{}, 4)
	tp := rabbittest.Declare(t, url, rabbittest.Topology{})
	msgs := sinktest.NewGen(2).Interleave(2, "a")
	publishWithSink(t, tp, msgs)

	ch, _ := channel(t, url)
	var mu sync.Mutex
	var attempts []time.Time
	var redelivered []bool
	var c counter
	run(t, ch, tp.Queue, ib, func(ctx context.Context, exec inboxtest.Exec, d amqp.Delivery) error {
		if d.MessageId == msgs[0].ID {
			mu.Lock()
			defer mu.Unlock()
			attempts = append(attempts, time.Now())
			redelivered = append(redelivered, d.Redelivered)
			if len(attempts) <= 3 {
				return errors.New("downstream not ready")
			}
		}
		return f.Increment(exec)
	}, Options{RetryBackoff: 5 * time.Second, OnAcked: c.acked})
	pgtest.Await(t, 20*time.Second, "both messages processed", func() bool { return c.get(inbox.Processed) == 2 })
	mu.Lock()
	defer mu.Unlock()
	if len(attempts) != 4 {
		t.Fatalf("%d attempts of the failing message, want 4 (3 failures, then success)", len(attempts))
	}
	// Waits of 100ms, 200ms, 400ms, less up to a fifth of jitter.
	for i, want := range []time.Duration{80, 160, 320} {
		if gap := attempts[i+1].Sub(attempts[i]); gap < want*time.Millisecond {
			t.Errorf("attempt %d came %s after the one before, want at least %dms", i+2, gap, want)
		}
	}
	if redelivered[0] || !redelivered[1] || !redelivered[3] {
		t.Errorf("redelivered flags %v: the retries are not RabbitMQ redeliveries", redelivered)
	}
	if n := f.Effects(t); n != 2 {
		t.Errorf("%d effects committed, want 2", n)
	}
}

// TestIntegrationCrashBeforeTheAckIsADuplicateOnRedelivery: when the
// consumer dies between the database commit and the ack, RabbitMQ
// redelivers the message once its channel closes; the next Loop finds it
// a Duplicate, acknowledges it and does not run the effect again.
func TestIntegrationCrashBeforeTheAckIsADuplicateOnRedelivery(t *testing.T) {
	url := rabbittest.Start(t)
	for _, d := range inboxtest.Drivers {
		t.Run(d.Name, func(t *testing.T) {
			f := inboxtest.NewFixture(t)
			ib := f.Open(t, d, inbox.Options{}, 4)
			tp := rabbittest.Declare(t, url, rabbittest.Topology{})
			publishWithSink(t, tp, sinktest.NewGen(3).Interleave(1, "a"))
			effect := func(ctx context.Context, exec inboxtest.Exec, _ amqp.Delivery) error { return f.Increment(exec) }

			crash := errors.New("crash before the ack")
			ch, closeCh := channel(t, url)
			_, wait := run(t, ch, tp.Queue, ib, effect, Options{beforeAck: func(amqp.Delivery) error { return crash }})
			if err := wait(); !errors.Is(err, crash) {
				t.Fatalf("Loop returned %v, want the crash", err)
			}
			closeCh()

			ch2, _ := channel(t, url)
			var c counter
			run(t, ch2, tp.Queue, ib, effect, Options{OnAcked: c.acked})
			pgtest.Await(t, 20*time.Second, "the redelivery acknowledged", func() bool { return c.get(inbox.Duplicate) == 1 })
			if n := f.Effects(t); n != 1 {
				t.Errorf("%d effects committed, want 1", n)
			}
		})
	}
}

// TestIntegrationPoisonStopsTheLoopUnlessOnPoisonParksIt: a message without
// message_id stops the loop by default and stays in the queue; an effect
// that fails MaxAttempts times goes to OnPoison, and when it returns nil
// the message is rejected, so that the queue's dead-letter exchange gets
// it, and the loop goes on.
func TestIntegrationPoisonStopsTheLoopUnlessOnPoisonParksIt(t *testing.T) {
	url := rabbittest.Start(t)
	f := inboxtest.NewFixture(t)
	ib := f.Open(t, inboxtest.Drivers[0], inbox.Options{}, 4)
	effect := func(ctx context.Context, exec inboxtest.Exec, _ amqp.Delivery) error { return f.Increment(exec) }

	// No id, no OnPoison: the loop stops, the message stays.
	tp := rabbittest.Declare(t, url, rabbittest.Topology{})
	rabbittest.Publish(t, url, tp.Exchange, "t", amqp.Publishing{Body: []byte(`{}`)})
	ch, closeCh := channel(t, url)
	_, wait := run(t, ch, tp.Queue, ib, effect, Options{})
	if err := wait(); !errors.Is(err, inbox.ErrEmptyID) {
		t.Fatalf("Loop returned %v, want an error wrapping inbox.ErrEmptyID", err)
	}
	closeCh()
	if left := rabbittest.Drain(t, url, tp.Queue); len(left) != 1 {
		t.Fatalf("%d messages in the queue after the loop stopped at the poison one, want 1", len(left))
	}

	// An effect that always fails, MaxAttempts 2, OnPoison parks it: the
	// dead-letter exchange gets it, the next message is processed.
	dlx := rabbittest.Declare(t, url, rabbittest.Topology{})
	tp2 := rabbittest.Declare(t, url, rabbittest.Topology{QueueArgs: amqp.Table{"x-dead-letter-exchange": dlx.Exchange}})
	msgs := sinktest.NewGen(4).Interleave(2, "a")
	publishWithSink(t, tp2, msgs)
	var (
		pmu      sync.Mutex
		poisoned []error
		c        counter
	)
	ch2, _ := channel(t, url)
	run(t, ch2, tp2.Queue, ib, func(ctx context.Context, exec inboxtest.Exec, d amqp.Delivery) error {
		if d.MessageId == msgs[0].ID {
			return errors.New("always fails")
		}
		return f.Increment(exec)
	}, Options{MaxAttempts: 2, RetryBackoff: 200 * time.Millisecond, OnAcked: c.acked,
		OnPoison: func(ctx context.Context, d amqp.Delivery, err error) error {
			pmu.Lock()
			defer pmu.Unlock()
			poisoned = append(poisoned, err)
			return nil
		}})
	pgtest.Await(t, 20*time.Second, "the second message processed and the first parked", func() bool {
		pmu.Lock()
		defer pmu.Unlock()
		return c.get(inbox.Processed) == 1 && len(poisoned) == 1
	})
	dead := rabbittest.Await(t, url, dlx.Queue, 1, 10*time.Second)
	if dead[0].MessageId != msgs[0].ID {
		t.Errorf("dead-lettered %s, want %s", dead[0].MessageId, msgs[0].ID)
	}
	pmu.Lock()
	defer pmu.Unlock()
	if len(poisoned) != 1 || !errors.Is(poisoned[0], inbox.ErrTooManyAttempts) || !strings.Contains(poisoned[0].Error(), "always fails") {
		t.Errorf("OnPoison got %v, want one error wrapping inbox.ErrTooManyAttempts and the effect's", poisoned)
	}
	if f.Count(t, "id = $1", msgs[0].ID) != 0 {
		t.Error("the poison message's id was recorded")
	}
}

// TestInvalidOptionsNameTheField: negative options and missing arguments
// are refused with inbox.ErrInvalidOptions before anything is consumed.
func TestInvalidOptionsNameTheField(t *testing.T) {
	effect := func(context.Context, inboxtest.Exec, amqp.Delivery) error { return nil }
	for _, c := range []struct {
		opts Options
		want string
	}{
		{Options{Prefetch: -1}, "Options.Prefetch"},
		{Options{RetryBackoff: -time.Second}, "Options.RetryBackoff"},
		{Options{MaxAttempts: -1}, "Options.MaxAttempts"},
	} {
		err := Loop(t.Context(), nil, "q", inbox.Processor[inboxtest.Exec](&inboxtest.Inbox{}), effect, c.opts)
		if !errors.Is(err, inbox.ErrInvalidOptions) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want ErrInvalidOptions naming %s", c.opts, err, c.want)
		}
	}
	if err := Loop[inboxtest.Exec](t.Context(), nil, "q", nil, effect, Options{}); !errors.Is(err, inbox.ErrInvalidOptions) {
		t.Errorf("nil channel and processor: %v", err)
	}
}

// TestIntegrationClaimCheckHandsTheEffectThePayload: a message over the
// threshold, published by the rabbitmq sink behind walpost's claim check
// (an object store in memory), reaches the effect of a loop with
// Options.ClaimCheck with its payload as the body; the small one beside
// it passes as it is.
func TestIntegrationClaimCheckHandsTheEffectThePayload(t *testing.T) {
	url := rabbittest.Start(t)
	f := inboxtest.NewFixture(t)
	ib := f.Open(t, inboxtest.Drivers[0], inbox.Options{}, 4)
	tp := rabbittest.Declare(t, url, rabbittest.Topology{})
	msgs := sinktest.NewGen(1).Interleave(2, "a")
	msgs[0].Payload = []byte(`"` + strings.Repeat("x", 100<<10) + `"`)
	store := &inboxtest.MemStore{}
	doc := fmt.Sprintf("name: events\nkind: rabbitmq\nurl: %q\nexchange: %q\n", tp.URL, tp.Exchange)
	s, err := rabbitmq.New(sinktest.SinkConfig(t, doc), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	cs := claimcheck.New(s, store, claimcheck.Options{Threshold: 10 << 10, Prefix: "walpost/", Slot: "slot", Log: zerolog.Nop()})
	defer cs.Close()
	if err := cs.Publish(context.Background(), msgs); err != nil {
		t.Fatal(err)
	}
	ch, _ := channel(t, url)
	var mu sync.Mutex
	got := map[string][]byte{}
	run(t, ch, tp.Queue, ib, func(ctx context.Context, exec inboxtest.Exec, d amqp.Delivery) error {
		mu.Lock()
		got[d.MessageId] = d.Body
		mu.Unlock()
		return f.Increment(exec)
	}, Options{ClaimCheck: inbox.WithClaimCheck(store)})
	pgtest.Await(t, 20*time.Second, "both messages processed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 2
	})
	mu.Lock()
	defer mu.Unlock()
	for _, m := range msgs {
		if string(got[m.ID]) != string(m.Payload) {
			t.Errorf("message %s: the effect got %d bytes, want the %d of its payload", m.ID, len(got[m.ID]), len(m.Payload))
		}
	}
}
