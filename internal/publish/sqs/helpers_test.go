package sqs

import (
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish/awsbatch"
	"github.com/walpost/walpost/internal/publish/sinktest"
	"github.com/walpost/walpost/internal/publish/sqs/sqsfake"
)

// TestMain gives the SDK's default chain static credentials and a region,
// as a user's environment would, and keeps it off the instance metadata
// service (there is none here).
func TestMain(m *testing.M) {
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID": "AKIDTEST", "AWS_SECRET_ACCESS_KEY": "walpost-test-secret", "AWS_REGION": "us-east-1",
		"AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": os.DevNull, "AWS_SHARED_CREDENTIALS_FILE": os.DevNull,
	} {
		os.Setenv(k, v)
	}
	os.Exit(m.Run())
}

var queueSeq atomic.Int64

// newQueue creates a queue on srv named after the test (FIFO with fifo)
// and returns its name.
func newQueue(srv *sqsfake.Server, fifo bool, opts sqsfake.QueueOptions) string {
	name := fmt.Sprintf("walpost-q%d", queueSeq.Add(1))
	if fifo {
		name += ".fifo"
	}
	srv.CreateQueue(name, opts)
	return name
}

// testLogger logs warnings and errors to the test.
func testLogger(t testing.TB) zerolog.Logger {
	return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
}

// newSink opens an sqs sink named "sqs" against srv with the queue
// setting and the extra YAML lines given, with the SDK's retries off, and
// closes it when the test ends.
func newSink(t testing.TB, srv *sqsfake.Server, queue string, extra ...string) *Sink {
	t.Helper()
	return newSinkAt(t, srv.URL(), queue, extra...)
}

// newSinkAt is newSink against the SQS endpoint given.
func newSinkAt(t testing.TB, endpoint, queue string, extra ...string) *Sink {
	t.Helper()
	rest := strings.Join(extra, "\n")
	if !strings.Contains(rest, "max_retries:") {
		rest += "\nmax_retries: 0"
	}
	doc := fmt.Sprintf("name: sqs\nkind: sqs\nendpoint: %s\nqueue: %q\n%s", endpoint, queue, rest)
	s, err := New(sinktest.SinkConfig(t, doc), testLogger(t))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s.(*Sink)
}

// readQueue returns the messages queue holds, mapped back to outbox
// messages: see asMessage.
func readQueue(t testing.TB, srv *sqsfake.Server, queue string) []*message.Message {
	t.Helper()
	var out []*message.Message
	for _, m := range srv.Messages(queue) {
		out = append(out, asMessage(t, m, strings.HasSuffix(queue, ".fifo")))
	}
	return out
}

// asMessage maps an SQS message back to the outbox message it was made
// from: the id, type and key attributes, the payload (decoded per
// body-encoding), the other attributes as headers. The key is the
// ordering key (the id for a NULL key); on a FIFO queue the group must be
// GroupID of it.
func asMessage(t testing.TB, sm sqsfake.Message, fifo bool) *message.Message {
	m := &message.Message{ID: sm.Attributes[AttrID], Type: sm.Attributes[AttrType], HasKey: true, Key: sm.Attributes[AttrKey]}
	if m.Key == "" {
		m.Key = m.ID
	}
	switch sm.Attributes[AttrBodyEncoding] {
	case BodyBase64:
		m.Payload, _ = Payload(sm.Body, toAttrs(map[string]string{AttrBodyEncoding: BodyBase64}))
	case BodyEmpty:
		m.Payload = []byte{}
	default:
		m.Payload, m.PayloadJSON = []byte(sm.Body), true
	}
	for k, v := range sm.Attributes {
		switch k {
		case AttrID, AttrType, AttrKey, AttrBodyEncoding:
			continue
		}
		if m.Headers == nil {
			m.Headers = map[string]string{}
		}
		m.Headers[k] = v
	}
	if fifo {
		if sm.GroupID != awsbatch.GroupID(m.Key) {
			t.Errorf("message %s: MessageGroupId %q, want %q for key %q", m.ID, sm.GroupID, awsbatch.GroupID(m.Key), m.Key)
		}
		if sm.DedupID != m.ID {
			t.Errorf("message %s: MessageDeduplicationId %q, want the id", m.ID, sm.DedupID)
		}
	} else if sm.GroupID != "" {
		t.Errorf("message %s: MessageGroupId %q on a standard queue", m.ID, sm.GroupID)
	}
	return m
}
