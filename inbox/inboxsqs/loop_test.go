package inboxsqs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/walpost/walpost/inbox"
	"github.com/walpost/walpost/inbox/internal/inboxtest"
	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/publish/awsbatch/fauxqs"
	"github.com/walpost/walpost/internal/publish/sqs/sqsfake"
)

// The SQS tests run against sqsfake, the SQS stand-in of the sqs sink's
// tests, and the test cluster of pgtest.

// newQueue starts a stand-in with one queue (FIFO with fifo) and returns
// it, a client and the queue URL.
func newQueue(t *testing.T, fifo bool) (*sqsfake.Server, *sqs.Client, string) {
	t.Helper()
	srv := sqsfake.Start(t)
	name := "inbox-test"
	if fifo {
		name += ".fifo"
	}
	u := srv.CreateQueue(name, sqsfake.QueueOptions{})
	cfg, err := awsconfig.LoadDefaultConfig(context.Background(), awsconfig.WithRetryMaxAttempts(1))
	if err != nil {
		t.Fatal(err)
	}
	client := sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.BaseEndpoint = aws.String(srv.URL()) })
	return srv, client, u
}

// send sends a message with outbox id id (as the sqs sink does: the id
// attribute; on a FIFO queue group and deduplication id).
func send(t *testing.T, c *sqs.Client, url, id, group, body string) {
	t.Helper()
	in := &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body),
		MessageAttributes: map[string]types.MessageAttributeValue{AttrID: {DataType: aws.String("String"), StringValue: aws.String(id)}}}
	if group != "" {
		in.MessageGroupId, in.MessageDeduplicationId = aws.String(group), aws.String(id+"-"+body)
	}
	var err error
	for range 5 { // a connection kept from before a restart of the stand-in fails once
		if _, err = c.SendMessage(context.Background(), in); err == nil {
			return
		}
	}
	t.Fatal(err)
}

// runLoop runs Loop in the background; stop cancels it and returns its
// error.
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
				err = errors.New("Loop did not return 30 s after its context ended")
			}
		})
		return err
	}
	t.Cleanup(func() { stop() })
	return stop
}

// flaky wraps the client and fails the first DeleteMessage calls.
type flaky struct {
	API
	failDeletes atomic.Int32
}

func (f *flaky) DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, o ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error) {
	if f.failDeletes.Add(-1) >= 0 {
		return nil, errors.New("delete failed for the test")
	}
	return f.API.DeleteMessage(ctx, in, o...)
}

// fifoBackends are the FIFO queues the order test runs against: the
// stand-in's, and fauxqs's (an emulator the project did not write,
// skipped where it cannot be installed). Each returns a client, the
// queue's URL and how many messages the queue holds.
var fifoBackends = []struct {
	name string
	open func(t *testing.T) (*sqs.Client, string, func() int)
}{
	{"sqsfake", func(t *testing.T) (*sqs.Client, string, func() int) {
		srv, c, u := newQueue(t, true)
		return c, u, func() int { return len(srv.Messages("inbox-test.fifo")) }
	}},
	{"fauxqs", func(t *testing.T) (*sqs.Client, string, func() int) {
		fq := fauxqs.Start(t)
		q := fq.CreateQueue(t, "inbox-test.fifo", nil)
		cfg, err := awsconfig.LoadDefaultConfig(context.Background(), awsconfig.WithRetryMaxAttempts(1))
		if err != nil {
			t.Fatal(err)
		}
		c := sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.BaseEndpoint = aws.String(fq.URL()) })
		return c, fq.QueueURL(q), func() int { return fq.Count(t, q) }
	}},
}

// TestIntegrationEffectOnceDeletedAfterCommitOrderPerGroupKept: a FIFO
// queue holds messages of two groups, one message twice (two copies with
// one outbox id, as a resend after the deduplication window would be);
// the effect fails the first time for one message, and the first delete
// after a commit fails. Every id's effect commits once, each group's
// effects run in send order (the failed message's group waits for it),
// and the queue ends empty. With both drivers, on sqsfake and fauxqs.
func TestIntegrationEffectOnceDeletedAfterCommitOrderPerGroupKept(t *testing.T) {
	t.Parallel()
	for _, b := range fifoBackends {
		for _, d := range inboxtest.Drivers {
			t.Run(b.name+"/"+d.Name, func(t *testing.T) {
				t.Parallel()
				effectOnceOrderPerGroup(t, d, b.open)
			})
		}
	}
}

// effectOnceOrderPerGroup is the test of one backend and driver.
func effectOnceOrderPerGroup(t *testing.T, d inboxtest.Driver, open func(t *testing.T) (*sqs.Client, string, func() int)) {
	f := inboxtest.NewFixture(t)
	ib := f.Open(t, d, inbox.Options{}, 2)
	c, u, held := open(t)
	var want []string
	for i := range 6 {
		g := []string{"a", "b"}[i%2]
		id := fmt.Sprintf("id-%s-%d", g, i)
		send(t, c, u, id, g, "x")
		want = append(want, id)
	}
	send(t, c, u, "id-a-0", "a", "again") // a second copy of id-a-0
	api := &flaky{API: c}
	api.failDeletes.Store(1)
	var mu sync.Mutex
	var order []string
	failedOnce := false
	var errs atomic.Int32
	stop := runLoop(t, func(ctx context.Context) error {
		return Loop(ctx, api, u, inbox.Processor[inboxtest.Exec](ib), func(ctx context.Context, exec inboxtest.Exec, msg types.Message) error {
			id := MessageID(msg)
			mu.Lock()
			defer mu.Unlock()
			if id == "id-a-2" && !failedOnce {
				failedOnce = true
				return errors.New("the effect fails once")
			}
			order = append(order, id)
			return f.Increment(exec)
		}, Options{WaitTime: time.Second, VisibilityTimeout: 2 * time.Second, RetryBackoff: time.Second,
			OnError: func(types.Message, error) { errs.Add(1) }})
	})
	if !pgtest.WaitFor(30*time.Second, func() bool { return held() == 0 }) {
		t.Fatalf("the queue still holds %d messages", held())
	}
	if err := stop(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Loop returned %v", err)
	}
	if n := f.Effects(t); n != len(want) {
		t.Fatalf("%d effects committed, want %d (one per id)", n, len(want))
	}
	mu.Lock()
	defer mu.Unlock()
	if !failedOnce {
		t.Fatal("the effect of id-a-2 never ran")
	}
	for _, g := range []string{"a", "b"} {
		var got, exp []string
		for _, id := range order {
			if id[3] == g[0] {
				got = append(got, id)
			}
		}
		for _, id := range want {
			if id[3] == g[0] {
				exp = append(exp, id)
			}
		}
		if !slices.Equal(got, exp) {
			t.Errorf("group %s: effects in order %v, want %v", g, got, exp)
		}
	}
	if errs.Load() < 2 {
		t.Errorf("OnError was called %d times, want at least 2 (the failed effect, the failed delete)", errs.Load())
	}
}

// TestIntegrationVisibilityExtendedWhileTheEffectRuns: an effect that
// takes 3 visibility timeouts of 1 s runs once; nobody else receives the
// message meanwhile.
func TestIntegrationVisibilityExtendedWhileTheEffectRuns(t *testing.T) {
	t.Parallel()
	f := inboxtest.NewFixture(t)
	ib := f.Open(t, inboxtest.Drivers[0], inbox.Options{}, 2)
	srv, c, u := newQueue(t, false)
	send(t, c, u, "slow", "", "x")
	send(t, c, u, "next", "", "y") // waits in the batch behind the slow one
	var calls atomic.Int32
	run := func(ctx context.Context) error {
		return Loop(ctx, c, u, inbox.Processor[inboxtest.Exec](ib), func(ctx context.Context, exec inboxtest.Exec, msg types.Message) error {
			calls.Add(1)
			if MessageID(msg) == "slow" {
				time.Sleep(3 * time.Second)
			}
			return f.Increment(exec)
		}, Options{WaitTime: time.Second, VisibilityTimeout: time.Second})
	}
	runLoop(t, run)
	time.Sleep(200 * time.Millisecond)
	runLoop(t, run) // a second consumer on the queue
	if !pgtest.WaitFor(30*time.Second, func() bool { return len(srv.Messages("inbox-test")) == 0 }) {
		t.Fatal("the queue is not empty")
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("effects called %d times, want 2: a message came back while its effect ran", n)
	}
	if n := f.Effects(t); n != 2 {
		t.Errorf("%d effects committed, want 2", n)
	}
}

// TestIntegrationReceiveRidesOutARestart: the stand-in stops and starts
// again while the loop polls; the loop reports the failed receives and
// goes on. (A receive whose answer the stop cut off may have taken a
// message: it comes back after the visibility timeout, as with SQS.)
func TestIntegrationReceiveRidesOutARestart(t *testing.T) {
	t.Parallel()
	f := inboxtest.NewFixture(t)
	ib := f.Open(t, inboxtest.Drivers[0], inbox.Options{}, 2)
	srv, c, u := newQueue(t, false)
	var errs atomic.Int32
	stop := runLoop(t, func(ctx context.Context) error {
		return Loop(ctx, c, u, inbox.Processor[inboxtest.Exec](ib), func(ctx context.Context, exec inboxtest.Exec, msg types.Message) error {
			return f.Increment(exec)
		}, Options{WaitTime: time.Second, VisibilityTimeout: 2 * time.Second, RetryBackoff: 500 * time.Millisecond, OnError: func(types.Message, error) { errs.Add(1) }})
	})
	send(t, c, u, "before", "", "x")
	if !pgtest.WaitFor(10*time.Second, func() bool { return f.Effects(t) == 1 }) {
		t.Fatal("the first message was not processed")
	}
	srv.Stop()
	if !pgtest.WaitFor(10*time.Second, func() bool { return errs.Load() > 0 }) {
		t.Fatal("no failed receive reported while the stand-in was down")
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	send(t, c, u, "after", "", "y")
	if !pgtest.WaitFor(20*time.Second, func() bool { return f.Effects(t) == 2 }) {
		t.Fatal("the message sent after the restart was not processed")
	}
	if err := stop(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Loop returned %v", err)
	}
}

// TestLoopRefusesInvalidOptions: options out of range wrap
// inbox.ErrInvalidOptions.
func TestLoopRefusesInvalidOptions(t *testing.T) {
	for _, o := range []Options{{MaxMessages: 11}, {WaitTime: 21 * time.Second}, {VisibilityTimeout: time.Millisecond}, {SettleTimeout: -1}} {
		err := Loop[inboxtest.Exec](context.Background(), &flaky{}, "u", &inboxtest.Inbox{}, func(context.Context, inboxtest.Exec, types.Message) error { return nil }, o)
		if !errors.Is(err, inbox.ErrInvalidOptions) {
			t.Errorf("%+v: got %v", o, err)
		}
	}
}

// TestIntegrationClaimCheckHandsTheEffectThePayload: with
// Options.ClaimCheck, a claim-checked message (the sqs sink's form: body
// "-", body-encoding empty, the walpost-claim-check attributes) reaches
// the effect with the payload, which Payload returns; one whose object
// does not match is never handed to the effect.
func TestIntegrationClaimCheckHandsTheEffectThePayload(t *testing.T) {
	t.Parallel()
	f := inboxtest.NewFixture(t)
	ib := f.Open(t, inboxtest.Drivers[0], inbox.Options{}, 2)
	_, c, u := newQueue(t, false)
	claim := inboxtest.NewClaim(200 << 10)
	str := func(v string) types.MessageAttributeValue {
		return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	for id, h := range map[string]map[string]string{"good": claim.Headers, "bad": claim.BadHeaders} {
		attrs := map[string]types.MessageAttributeValue{AttrID: str(id), "body-encoding": str("empty")}
		for k, v := range h {
			attrs[k] = str(v)
		}
		if _, err := c.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(u), MessageBody: aws.String("-"), MessageAttributes: attrs}); err != nil {
			t.Fatal(err)
		}
	}
	var res inboxtest.ClaimResults
	runLoop(t, func(ctx context.Context) error {
		return Loop(ctx, c, u, inbox.Processor[inboxtest.Exec](ib), func(ctx context.Context, exec inboxtest.Exec, msg types.Message) error {
			p, err := Payload(msg)
			if err != nil {
				return err
			}
			res.Got(MessageID(msg), p)
			return f.Increment(exec)
		}, Options{WaitTime: time.Second, RetryBackoff: time.Second, ClaimCheck: inbox.WithClaimCheck(claim.Fetcher),
			OnError: func(_ types.Message, err error) { res.OnError(err) }})
	})
	res.Check(t, claim, 1)
}
