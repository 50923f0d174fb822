package sbfake

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/go-amqp"

	"github.com/walpost/walpost/internal/publish/sinktest"
)

func client(t *testing.T, b *Broker) *azservicebus.Client {
	c, err := azservicebus.NewClientFromConnectionString(b.ConnectionString(), &azservicebus.ClientOptions{
		RetryOptions: azservicebus.RetryOptions{MaxRetries: 2, RetryDelay: 50 * time.Millisecond, MaxRetryDelay: 200 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func str(s string) *string { return &s }

// queueQ starts a stand-in with queue "q" and returns it, a client, a
// context for the test and a sender to the queue.
func queueQ(t *testing.T) (*Broker, *azservicebus.Client, context.Context, *azservicebus.Sender) {
	b := Start(t)
	b.CreateQueue(t, "q", QueueOptions{})
	c := client(t, b)
	s, err := c.NewSender("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	return b, c, sinktest.Context(t, 30*time.Second), s
}

// TestStandInSpeaksWhatTheSDKNeeds drives the stand-in with the SDK: a
// batch and a single message in, peek, receive with peek-lock, abandon
// (delivered again, delivery count up), complete, and an empty queue.
func TestStandInSpeaksWhatTheSDKNeeds(t *testing.T) {
	b, c, ctx, s := queueQ(t)
	batch, err := s.NewMessageBatch(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := batch.AddMessage(&azservicebus.Message{MessageID: str(fmt.Sprint("m", i)), Body: []byte(fmt.Sprint("body", i)),
			Subject: str("t"), ApplicationProperties: map[string]any{"k": "v"}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SendMessageBatch(ctx, batch, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.SendMessage(ctx, &azservicebus.Message{MessageID: str("m3"), Body: []byte("body3")}, nil); err != nil {
		t.Fatal(err)
	}
	if st := b.Stats(t, "q"); st.Stored != 4 || st.Transfers != 2 || st.Batches != 1 {
		t.Fatalf("stats %+v, want 4 stored from 2 transfers, 1 of them a batch", st)
	}

	r, err := c.NewReceiverForQueue("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	peeked, err := r.PeekMessages(ctx, 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(peeked) != 4 || peeked[0].MessageID != "m0" || *peeked[3].SequenceNumber != 4 {
		t.Fatalf("peeked %d messages", len(peeked))
	}

	msgs, err := r.ReceiveMessages(ctx, 4, &azservicebus.ReceiveMessagesOptions{TimeAfterFirstMessage: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 4 {
		t.Fatalf("received %d messages, want 4", len(msgs))
	}
	m := msgs[0]
	if m.MessageID != "m0" || string(m.Body) != "body0" || *m.Subject != "t" || m.ApplicationProperties["k"] != "v" ||
		m.DeliveryCount != 1 || m.LockedUntil == nil || m.EnqueuedTime == nil || *m.SequenceNumber != 1 {
		t.Fatalf("first message %+v", m)
	}
	if err := r.AbandonMessage(ctx, m, nil); err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs[1:] {
		if err := r.CompleteMessage(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
	}
	again, err := r.ReceiveMessages(ctx, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != 1 || again[0].MessageID != "m0" || again[0].DeliveryCount != 2 {
		t.Fatalf("after abandon received %+v, want m0 with delivery count 2", again)
	}
	if err := r.CompleteMessage(ctx, again[0], nil); err != nil {
		t.Fatal(err)
	}
	if st := b.Stats(t, "q"); st.Active != 0 || st.Locked != 0 || st.Completed != 4 || st.Abandoned != 1 {
		t.Fatalf("stats %+v, want an empty queue after 4 completes and 1 abandon", st)
	}
}

// TestStandInReleaseIsNotADelivery: a message that arrives on the SDK's
// credit between two receive calls is released by the SDK, and Service
// Bus does not count a release as a delivery: the next receive gets it
// with delivery count 1, not 2 (counting it made an inbox test see
// delivery counts 1, 3 once).
func TestStandInReleaseIsNotADelivery(t *testing.T) {
	b, c, ctx, s := queueQ(t)
	send := func(id string) {
		if err := s.SendMessage(ctx, &azservicebus.Message{MessageID: str(id), Body: []byte(id)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	r, err := c.NewReceiverForQueue("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	send("first")
	// Five credits for one message: four stay on the link after the call.
	msgs, err := r.ReceiveMessages(ctx, 5, &azservicebus.ReceiveMessagesOptions{TimeAfterFirstMessage: 50 * time.Millisecond})
	if err != nil || len(msgs) != 1 {
		t.Fatalf("received %d messages (%v), want 1", len(msgs), err)
	}
	if err := r.CompleteMessage(ctx, msgs[0], nil); err != nil {
		t.Fatal(err)
	}
	send("second") // arrives on the left-over credit; the SDK releases it
	deadline := time.Now().Add(10 * time.Second)
	for b.Stats(t, "q").Released == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the SDK released nothing: %+v", b.Stats(t, "q"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	again, err := r.ReceiveMessages(ctx, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != 1 || again[0].MessageID != "second" || again[0].DeliveryCount != 1 {
		t.Fatalf("after a release received %+v, want second with delivery count 1", again)
	}
	if st := b.Stats(t, "q"); st.Abandoned != 0 {
		t.Errorf("stats %+v: a release counted as an abandon", st)
	}
}

func TestStandInRefusesUnknownEntityAndExpiredLocks(t *testing.T) {
	b := Start(t)
	b.CreateQueue(t, "short", QueueOptions{LockDuration: 300 * time.Millisecond})
	c := client(t, b)
	ctx := sinktest.Context(t, 30*time.Second)

	s, err := c.NewSender("missing", nil)
	if err != nil {
		t.Fatal(err)
	}
	err = s.SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil)
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Condition != amqp.ErrCondNotFound {
		t.Fatalf("sending to a missing queue: %v, want amqp:not-found", err)
	}

	s, err = c.NewSender("short", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SendMessage(ctx, &azservicebus.Message{MessageID: str("x"), Body: []byte("x")}, nil); err != nil {
		t.Fatal(err)
	}
	r, err := c.NewReceiverForQueue("short", nil)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := r.ReceiveMessages(ctx, 1, nil)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("receive: %v, %d messages", err, len(msgs))
	}
	time.Sleep(500 * time.Millisecond) // let the lock expire
	err = r.CompleteMessage(ctx, msgs[0], nil)
	var sbErr *azservicebus.Error
	if !errors.As(err, &sbErr) || sbErr.Code != azservicebus.CodeLockLost {
		t.Fatalf("completing after the lock expired: %v, want code %s", err, azservicebus.CodeLockLost)
	}
	again, err := r.ReceiveMessages(ctx, 1, nil)
	if err != nil || len(again) != 1 || again[0].DeliveryCount != 2 {
		t.Fatalf("after lock expiry: %v, %+v", err, again)
	}
}
