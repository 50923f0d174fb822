package inboxnats

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/walpost/walpost/inbox"
	"github.com/walpost/walpost/inbox/internal/inboxtest"
	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/publish/natsjs/natstest"
)

// publish stores one message per id on subject (each id twice when
// twice: a duplicate the stream's window does not see, e.g. a resend
// after the window).
func publishIDs(t *testing.T, url, subject string, ids ...string) {
	t.Helper()
	js := natstest.JetStream(t, url)
	for _, id := range ids {
		m := nats.NewMsg(subject)
		m.Header.Set("Nats-Msg-Id", id)
		m.Data = []byte(`{}`)
		if _, err := js.PublishMsg(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
}

// TestIntegrationEachMessageTakesEffectOnceAndIsAckedAfterCommit: messages
// with ids (one id stored twice under two stream sequences, as after a
// resend outside the duplicate window), a first attempt of one failing:
// every effect commits exactly once, the failed message is Nak'ed and
// redelivered, and the consumer ends with nothing pending and nothing
// unacknowledged. Both inbox drivers.
func TestIntegrationEachMessageTakesEffectOnceAndIsAckedAfterCommit(t *testing.T) {
	url := natstest.Start(t)
	for _, d := range inboxtest.Drivers {
		t.Run(d.Name, func(t *testing.T) {
			prefix := natstest.Unique(t)
			st := natstest.CreateStream(t, url, jetstream.StreamConfig{Name: prefix, Subjects: []string{prefix + ".>"}, Duplicates: time.Second})
			publishIDs(t, url, prefix+".order", "a", "b", "c")
			time.Sleep(1100 * time.Millisecond) // past the duplicate window: "b" is stored again
			publishIDs(t, url, prefix+".order", "b", "d")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cons, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "billing", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1, AckWait: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			f := inboxtest.NewFixture(t)
			ib := f.Open(t, d, inbox.Options{}, 2)
			var failedOnce atomic.Bool
			var acked atomic.Int32
			var order []string
			errc := make(chan error, 1)
			go func() {
				errc <- Loop(ctx, cons, inbox.Processor[inboxtest.Exec](ib), func(ctx context.Context, exec inboxtest.Exec, m jetstream.Msg) error {
					if m.Headers().Get("Nats-Msg-Id") == "c" && failedOnce.CompareAndSwap(false, true) {
						return errors.New("first attempt fails")
					}
					order = append(order, m.Headers().Get("Nats-Msg-Id"))
					return f.Increment(exec)
				}, Options{RetryBackoff: 200 * time.Millisecond, OnAcked: func(jetstream.Msg, string, inbox.Result) { acked.Add(1) }})
			}()
			pgtest.Await(t, 20*time.Second, "5 acknowledged messages", func() bool { return acked.Load() == 5 })
			cancel()
			if err := <-errc; !errors.Is(err, context.Canceled) {
				t.Errorf("Loop = %v, want context.Canceled", err)
			}
			if n := f.Effects(t); n != 4 {
				t.Errorf("%d effects, want 4 (a, b, c, d once each)", n)
			}
			if got := f.Count(t, "true"); got != 4 {
				t.Errorf("%d inbox rows, want 4", got)
			}
			info, err := cons.Info(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if info.NumPending != 0 || info.NumAckPending != 0 || info.NumRedelivered != 0 {
				t.Errorf("consumer: %d pending, %d unacknowledged, %d redelivered", info.NumPending, info.NumAckPending, info.NumRedelivered)
			}
			if want := []string{"a", "b", "c", "d"}; len(order) != 4 || order[2] != "c" {
				t.Errorf("effects in order %v, want %v (the failed message redelivered before the next)", order, want)
			}
		})
	}
}

// TestIntegrationMessageWithoutIDStopsTheLoopUnacked: a message without
// Nats-Msg-Id stops the loop with inbox.ErrEmptyID, unacknowledged.
func TestIntegrationMessageWithoutIDStopsTheLoopUnacked(t *testing.T) {
	url := natstest.Start(t)
	prefix := natstest.Unique(t)
	st := natstest.CreateStream(t, url, jetstream.StreamConfig{Name: prefix, Subjects: []string{prefix + ".>"}})
	js := natstest.JetStream(t, url)
	if _, err := js.Publish(context.Background(), prefix+".x", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cons, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	f := inboxtest.NewFixture(t)
	ib := f.Open(t, inboxtest.Drivers[0], inbox.Options{}, 2)
	err = Loop(ctx, cons, inbox.Processor[inboxtest.Exec](ib), func(context.Context, inboxtest.Exec, jetstream.Msg) error { return nil }, Options{})
	if !errors.Is(err, inbox.ErrEmptyID) {
		t.Fatalf("Loop = %v, want inbox.ErrEmptyID", err)
	}
	if info, _ := cons.Info(context.Background()); info == nil || info.NumAckPending != 1 {
		t.Errorf("consumer info %+v: want the message delivered and unacknowledged", info)
	}
}

// flakyDB is a Processor whose database fails (before the effect runs)
// the first down attempts at each id, then runs the effect without a
// transaction.
type flakyDB struct {
	mu   sync.Mutex
	down int
	seen map[string]int
}

func (p *flakyDB) Process(ctx context.Context, id string, effect func(context.Context, struct{}) error) (inbox.Result, error) {
	p.mu.Lock()
	p.seen[id]++
	n := p.seen[id]
	p.mu.Unlock()
	if n <= p.down {
		return 0, errors.New("database unreachable (test)")
	}
	if err := effect(ctx, struct{}{}); err != nil {
		return 0, err
	}
	return inbox.Processed, nil
}

// TestIntegrationOnlyEffectFailuresCountTowardMaxAttempts: a message
// whose deliveries fail in the database (more of them than MaxAttempts)
// is not poison and is acked once the database is back; a message whose
// effect fails is poison after exactly MaxAttempts deliveries.
func TestIntegrationOnlyEffectFailuresCountTowardMaxAttempts(t *testing.T) {
	url := natstest.Start(t)
	prefix := natstest.Unique(t)
	st := natstest.CreateStream(t, url, jetstream.StreamConfig{Name: prefix, Subjects: []string{prefix + ".>"}})
	publishIDs(t, url, prefix+".x", "good", "bad")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cons, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1})
	if err != nil {
		t.Fatal(err)
	}
	p := &flakyDB{down: 4, seen: map[string]int{}}
	var effects sync.Map
	var acked []string
	err = Loop(ctx, cons, inbox.Processor[struct{}](p), func(_ context.Context, _ struct{}, m jetstream.Msg) error {
		id := m.Headers().Get("Nats-Msg-Id")
		n, _ := effects.LoadOrStore(id, new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
		if id == "bad" {
			return errors.New("effect fails (test)")
		}
		return nil
	}, Options{MaxAttempts: 2, RetryBackoff: 20 * time.Millisecond,
		OnAcked: func(_ jetstream.Msg, id string, _ inbox.Result) { acked = append(acked, id) }})
	if !errors.Is(err, inbox.ErrTooManyAttempts) {
		t.Fatalf("Loop = %v, want inbox.ErrTooManyAttempts for the message whose effect fails", err)
	}
	if fmt.Sprint(acked) != "[good]" {
		t.Errorf("acked %v, want [good]: 4 database failures are not 2 effect failures", acked)
	}
	if n, _ := effects.Load("bad"); n == nil || n.(*atomic.Int32).Load() != 2 {
		t.Errorf("the failing effect ran %v times, want MaxAttempts (2)", n)
	}
	if !strings.Contains(err.Error(), "effect fails") {
		t.Errorf("poison error %v does not carry the effect's error", err)
	}
}

// TestIntegrationPrefetchBoundsTheMessagesPulledAhead: while a slow
// effect runs, only about Options.Prefetch messages are delivered and
// waiting (their AckWait running), not the client's default of 500.
func TestIntegrationPrefetchBoundsTheMessagesPulledAhead(t *testing.T) {
	url := natstest.Start(t)
	prefix := natstest.Unique(t)
	st := natstest.CreateStream(t, url, jetstream.StreamConfig{Name: prefix, Subjects: []string{prefix + ".>"}})
	var ids []string
	for i := range 40 {
		ids = append(ids, fmt.Sprint("m", i))
	}
	publishIDs(t, url, prefix+".x", ids...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cons, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	const prefetch = 3
	inEffect, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	errc := make(chan error, 1)
	go func() {
		errc <- Loop(ctx, cons, inbox.Processor[struct{}](&flakyDB{seen: map[string]int{}}), func(context.Context, struct{}, jetstream.Msg) error {
			once.Do(func() { close(inEffect); <-release })
			return nil
		}, Options{Prefetch: prefetch})
	}()
	<-inEffect
	time.Sleep(300 * time.Millisecond) // let the client pull what it will
	info, err := cons.Info(ctx)
	close(release)
	if err != nil {
		t.Fatal(err)
	}
	if info.NumAckPending > 2*prefetch {
		t.Errorf("%d messages delivered and unacknowledged while the first effect ran, want about Prefetch (%d)", info.NumAckPending, prefetch)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("Loop = %v, want context.Canceled", err)
	}
}

func TestLoopRejectsInvalidOptions(t *testing.T) {
	for _, o := range []Options{{Prefetch: -1}, {RetryBackoff: -time.Second}, {MaxAttempts: -1}} {
		if _, err := o.withDefaults(); !errors.Is(err, inbox.ErrInvalidOptions) || !strings.Contains(err.Error(), "inboxnats.Options.") {
			t.Errorf("options %+v: %v, want inbox.ErrInvalidOptions naming the field", o, err)
		}
	}
	if o, err := (Options{}).withDefaults(); err != nil || o.Prefetch != DefaultPrefetch {
		t.Errorf("zero Options: Prefetch %d (%v), want DefaultPrefetch %d", o.Prefetch, err, DefaultPrefetch)
	}
}

// TestIntegrationClaimCheckHandsTheEffectThePayload: with
// Options.ClaimCheck, the effect of a claim-checked message (empty data,
// the walpost-claim-check headers) reads the fetched payload from Data.
func TestIntegrationClaimCheckHandsTheEffectThePayload(t *testing.T) {
	url := natstest.Start(t)
	prefix := natstest.Unique(t)
	st := natstest.CreateStream(t, url, jetstream.StreamConfig{Name: prefix, Subjects: []string{prefix + ".>"}})
	claim := inboxtest.NewClaim(100 << 10)
	js := natstest.JetStream(t, url)
	m := nats.NewMsg(prefix + ".order")
	m.Header.Set("Nats-Msg-Id", "big")
	for k, v := range claim.Headers {
		m.Header.Set(k, v)
	}
	if _, err := js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cons, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "billing", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	f := inboxtest.NewFixture(t)
	ib := f.Open(t, inboxtest.Drivers[0], inbox.Options{}, 2)
	got := make(chan []byte, 1)
	go Loop(ctx, cons, inbox.Processor[inboxtest.Exec](ib), func(ctx context.Context, exec inboxtest.Exec, m jetstream.Msg) error {
		select {
		case got <- m.Data():
		default:
		}
		return f.Increment(exec)
	}, Options{ClaimCheck: inbox.WithClaimCheck(claim.Fetcher)})
	select {
	case data := <-got:
		if string(data) != string(claim.Payload) {
			t.Fatalf("the effect got %d bytes, not the payload", len(data))
		}
	case <-ctx.Done():
		t.Fatal("the effect did not run")
	}
}
