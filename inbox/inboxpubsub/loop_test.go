package inboxpubsub

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gps "cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/walpost/walpost/inbox"
	"github.com/walpost/walpost/inbox/internal/inboxtest"
	"github.com/walpost/walpost/internal/pgtest"
)

// The tests run against pstest, the Pub/Sub module's in-process fake, and
// the test cluster of pgtest.

const project = "walpost-test"

// newSubscription starts pstest with a topic and an ordered subscription
// on it, and returns a client, the topic's publisher (ordering on) and the
// subscription's subscriber.
func newSubscription(t *testing.T) (*pstest.Server, *gps.Publisher, *gps.Subscriber) {
	t.Helper()
	srv := pstest.NewServer()
	t.Cleanup(func() { srv.Close() })
	c, err := gps.NewClient(context.Background(), project, option.WithEndpoint(srv.Addr), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())), option.WithTelemetryDisabled())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	topic, sub := "projects/"+project+"/topics/t", "projects/"+project+"/subscriptions/s"
	ctx := context.Background()
	if _, err := c.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topic}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{Name: sub, Topic: topic,
		EnableMessageOrdering: true, AckDeadlineSeconds: 10}); err != nil {
		t.Fatal(err)
	}
	pub := c.Publisher(topic)
	pub.EnableMessageOrdering = true
	t.Cleanup(pub.Stop)
	return srv, pub, c.Subscriber(sub)
}

func publish(t *testing.T, pub *gps.Publisher, id, key string) {
	t.Helper()
	r := pub.Publish(context.Background(), &gps.Message{Data: []byte("x"), OrderingKey: key, Attributes: map[string]string{AttrID: id}})
	if _, err := r.Get(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestIntegrationEffectOnceAckedAfterCommit: messages of two keys, one id
// published twice, an effect that fails once for one message: every id's
// effect commits once, every copy is acked in the end, the failure was
// reported. With both drivers.
func TestIntegrationEffectOnceAckedAfterCommit(t *testing.T) {
	t.Parallel()
	for _, d := range inboxtest.Drivers {
		t.Run(d.Name, func(t *testing.T) {
			f := inboxtest.NewFixture(t)
			ib := f.Open(t, d, inbox.Options{}, 4)
			_, pub, sub := newSubscription(t)
			ids := map[string]bool{}
			for i := range 6 {
				id := fmt.Sprintf("id-%d", i)
				publish(t, pub, id, []string{"a", "b"}[i%2])
				ids[id] = true
			}
			publish(t, pub, "id-0", "a") // a second copy
			var mu sync.Mutex
			failedOnce := false
			var acked, errs atomic.Int32
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				done <- Loop(ctx, sub, inbox.Processor[inboxtest.Exec](ib), func(ctx context.Context, exec inboxtest.Exec, msg *gps.Message) error {
					mu.Lock()
					if MessageID(msg) == "id-2" && !failedOnce {
						failedOnce = true
						mu.Unlock()
						return errors.New("the effect fails once")
					}
					mu.Unlock()
					return f.Increment(exec)
				}, Options{RetryBackoff: 200 * time.Millisecond,
					OnAcked: func(*gps.Message, inbox.Result) { acked.Add(1) },
					OnError: func(*gps.Message, error) { errs.Add(1) }})
			}()
			if !pgtest.WaitFor(30*time.Second, func() bool { return acked.Load() >= 7 }) {
				t.Fatalf("%d of 7 copies acked", acked.Load())
			}
			cancel()
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("Loop returned %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("Loop did not return after its context ended")
			}
			if n := f.Effects(t); n != len(ids) {
				t.Fatalf("%d effects committed, want %d (one per id)", n, len(ids))
			}
			if errs.Load() < 1 {
				t.Error("the failed effect was not reported")
			}
		})
	}
}

func TestLoopRefusesNilArguments(t *testing.T) {
	err := Loop[inboxtest.Exec](context.Background(), nil, &inboxtest.Inbox{}, nil, Options{})
	if !errors.Is(err, inbox.ErrInvalidOptions) {
		t.Fatalf("got %v", err)
	}
}

// TestIntegrationClaimCheckHandsTheEffectThePayload: with
// Options.ClaimCheck, a claim-checked message's effect gets the fetched
// payload as Data; one whose object does not match is never handed to
// the effect (reported, nacked).
func TestIntegrationClaimCheckHandsTheEffectThePayload(t *testing.T) {
	t.Parallel()
	f := inboxtest.NewFixture(t)
	ib := f.Open(t, inboxtest.Drivers[0], inbox.Options{}, 4)
	_, pub, sub := newSubscription(t)
	claim := inboxtest.NewClaim(300 << 10)
	for id, h := range map[string]map[string]string{"good": claim.Headers, "bad": claim.BadHeaders} {
		attrs := map[string]string{AttrID: id}
		for k, v := range h {
			attrs[k] = v
		}
		if _, err := pub.Publish(context.Background(), &gps.Message{Data: []byte{}, OrderingKey: id, Attributes: attrs}).Get(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	var res inboxtest.ClaimResults
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go Loop(ctx, sub, inbox.Processor[inboxtest.Exec](ib), func(ctx context.Context, exec inboxtest.Exec, msg *gps.Message) error {
		res.Got(MessageID(msg), msg.Data)
		return f.Increment(exec)
	}, Options{RetryBackoff: 100 * time.Millisecond, ClaimCheck: inbox.WithClaimCheck(claim.Fetcher),
		OnError: func(_ *gps.Message, err error) { res.OnError(err) }})
	res.Check(t, claim, 2)
}
