package servicebus

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish/servicebus/sbfake"
	"github.com/walpost/walpost/internal/publish/sinktest"
)

// Environment variables that point the integration tests at a real
// namespace or the official emulator instead of the stand-in.
const (
	envConnectionString = "WALPOST_TEST_SERVICEBUS_CONNECTION_STRING"
	// envQueue names a queue without sessions whose messages the tests may
	// delete; it is purged before each test that uses it.
	envQueue = "WALPOST_TEST_SERVICEBUS_QUEUE"
)

// target is where a test's messages go: a queue of the stand-in, or the
// queue of a real namespace named by the environment.
type target struct {
	cs     string
	queue  string
	fake   *sbfake.Broker // nil for a real namespace
	client *azservicebus.Client
}

var queueSeq atomic.Int64

// newTarget returns a fresh, empty queue: on a new stand-in, created with
// opts, or the environment's queue of a real namespace, purged (opts do
// not apply there; tests that need them call needFake first).
func newTarget(t testing.TB, opts sbfake.QueueOptions) *target {
	t.Helper()
	tg := &target{}
	if cs := os.Getenv(envConnectionString); cs != "" {
		tg.cs, tg.queue = cs, os.Getenv(envQueue)
		if tg.queue == "" {
			t.Fatalf("%s is set but %s is not: name a queue without sessions that the tests may empty", envConnectionString, envQueue)
		}
	} else {
		tg.fake = sbfake.Start(t)
		tg.cs = tg.fake.ConnectionString()
		tg.queue = fmt.Sprintf("walpost-q%d", queueSeq.Add(1))
		tg.fake.CreateQueue(t, tg.queue, opts)
	}
	c, err := azservicebus.NewClientFromConnectionString(tg.cs, &azservicebus.ClientOptions{
		RetryOptions: azservicebus.RetryOptions{MaxRetries: 2, RetryDelay: 50 * time.Millisecond, MaxRetryDelay: time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	tg.client = c
	if tg.fake == nil {
		tg.purge(t, tg.queue)
	}
	return tg
}

// parallel marks the test parallel when it runs against the stand-in
// (each test has its own); tests against a real namespace share its queue
// and run one at a time.
func parallel(t *testing.T) {
	if os.Getenv(envConnectionString) == "" {
		t.Parallel()
	}
}

// needFake skips the test unless it runs against the stand-in.
func needFake(t testing.TB, why string) {
	if os.Getenv(envConnectionString) != "" {
		t.Skipf("runs against the stand-in only: %s", why)
	}
}

// purge deletes every message of queue.
func (tg *target) purge(t testing.TB, queue string) {
	t.Helper()
	r, err := tg.client.NewReceiverForQueue(queue, &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		msgs, err := r.ReceiveMessages(ctx, 1000, nil)
		cancel()
		if len(msgs) == 0 || err != nil {
			return
		}
	}
}

// peekAll returns every message of queue, in sequence order, without
// removing them.
func (tg *target) peekAll(t testing.TB, queue string) []*azservicebus.ReceivedMessage {
	t.Helper()
	r, err := tg.client.NewReceiverForQueue(queue, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	ctx := sinktest.Context(t, 60*time.Second)
	var all []*azservicebus.ReceivedMessage
	from := int64(0)
	for {
		msgs, err := r.PeekMessages(ctx, 250, &azservicebus.PeekMessagesOptions{FromSequenceNumber: &from})
		if err != nil {
			t.Fatalf("peeking %s from sequence number %d: %v", queue, from, err)
		}
		if len(msgs) == 0 {
			return all
		}
		all = append(all, msgs...)
		from = *msgs[len(msgs)-1].SequenceNumber + 1
	}
}

// readAll returns the messages of queue as the sink's input would look:
// see asMessage.
func (tg *target) readAll(t testing.TB, queue string) []*message.Message {
	var out []*message.Message
	for _, rm := range tg.peekAll(t, queue) {
		out = append(out, asMessage(rm))
	}
	return out
}

// asMessage maps a Service Bus message back to the outbox message it was
// made from, as far as it carries it: MessageId into ID, Subject into
// Type, SessionId into Key, the body into Payload, the application
// properties into Headers (less Diagnostic-Id when it repeats the
// traceparent, since the sink adds it).
func asMessage(rm *azservicebus.ReceivedMessage) *message.Message {
	m := &message.Message{ID: rm.MessageID, Payload: rm.Body}
	if rm.Subject != nil {
		m.Type = *rm.Subject
	}
	if rm.SessionID != nil {
		m.Key, m.HasKey = *rm.SessionID, true
	}
	m.PayloadJSON = rm.ContentType != nil && *rm.ContentType == ContentTypeJSON
	for k, v := range rm.ApplicationProperties {
		if k == PropertyDiagnosticID && v == rm.ApplicationProperties[HeaderTraceparent] {
			continue
		}
		if m.Headers == nil {
			m.Headers = map[string]string{}
		}
		m.Headers[k] = fmt.Sprint(v)
	}
	return m
}

// testLogger logs warnings and errors to the test.
func testLogger(t testing.TB) zerolog.Logger {
	return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
}

// newSink opens a servicebus sink named "bus" for tg with the entity
// setting (e.g. "queue: q") and the extra YAML lines given, with quick SDK
// retries, and closes it when the test ends.
func newSink(t testing.TB, tg *target, entity string, extra ...string) *Sink {
	t.Helper()
	doc := fmt.Sprintf("name: bus\nkind: servicebus\nconnection_string: %q\n%s\nretry_delay: 50ms\nmax_retry_delay: 500ms\n%s",
		tg.cs, entity, strings.Join(extra, "\n"))
	s, err := New(sinktest.SinkConfig(t, doc), testLogger(t))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s.(*Sink)
}
