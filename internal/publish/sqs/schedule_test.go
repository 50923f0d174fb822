package sqs

import (
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	sqsapi "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish/sinktest"
	"github.com/walpost/walpost/internal/publish/sqs/sqsfake"
)

// TestDelaySeconds: a deliver_at up to 15 minutes ahead is DelaySeconds,
// rounded up; further ahead, or to a FIFO queue, the message is refused
// (never sent early); a deliver_at past is no delay.
func TestDelaySeconds(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		ahead time.Duration
		fifo  bool
		want  int32
		err   string
	}{
		{0, false, 0, ""},
		{-time.Minute, true, 0, ""},
		{2500 * time.Millisecond, false, 3, ""},
		{15 * time.Minute, false, 900, ""},
		{15*time.Minute + time.Second, false, 0, "over the 15 minutes"},
		{time.Second, true, 0, "FIFO queue"},
	} {
		m := &message.Message{}
		if c.ahead != 0 {
			m.DeliverAt = now.Add(c.ahead)
		}
		got, err := delaySeconds(m, c.fifo, now)
		if got != c.want || (err == nil) != (c.err == "") || err != nil && !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s ahead (fifo %v): %d, %v; want %d, %q", c.ahead, c.fifo, got, err, c.want, c.err)
		}
	}
}

// TestIntegrationDelayedMessageIsNotReceivedBeforeItsTime: through the
// stand-in, which honours DelaySeconds as SQS does, a message whose
// deliver_at is 2 s ahead is stored with DelaySeconds 2 and no receive
// gets it before its deliver_at, while the message sent with it without
// one is received at once.
func TestIntegrationDelayedMessageIsNotReceivedBeforeItsTime(t *testing.T) {
	t.Parallel()
	srv := sqsfake.Start(t)
	q := newQueue(srv, false, sqsfake.QueueOptions{})
	s := newSink(t, srv, q)
	g := sinktest.NewGen(5)
	later, now := g.Message("a"), g.Message("b")
	later.DeliverAt = time.Now().Add(2 * time.Second)
	ctx := sinktest.Context(t, 30*time.Second)
	if err := s.Publish(ctx, []*message.Message{later, now}); err != nil {
		t.Fatal(err)
	}
	stored := srv.Messages(q)
	if len(stored) != 2 || stored[0].DelaySeconds != 2 || stored[1].DelaySeconds != 0 {
		t.Fatalf("stored %+v, want DelaySeconds 2 and 0", stored)
	}
	client := s.client.(*sqsapi.Client)
	url := srv.URL() + "/000000000000/" + q
	var got []string
	for len(got) < 2 {
		out, err := client.ReceiveMessage(ctx, &sqsapi.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10,
			WaitTimeSeconds: 1, MessageAttributeNames: []string{"All"}})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range out.Messages {
			id := m.MessageAttributes[AttrID]
			if id.StringValue == nil {
				t.Fatalf("received a message without walpost-id: %+v", m.MessageAttributes)
			}
			if *id.StringValue == later.ID && time.Now().Before(later.DeliverAt) {
				t.Fatalf("the delayed message was received at %s, before its deliver_at %s", time.Now().Format(time.RFC3339Nano), later.DeliverAt.Format(time.RFC3339Nano))
			}
			got = append(got, *id.StringValue)
		}
	}
	if got[0] != now.ID || got[1] != later.ID {
		t.Fatalf("received %v, want %s (no delay) then %s", got, now.ID, later.ID)
	}
}
