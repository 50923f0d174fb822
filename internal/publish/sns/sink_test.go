package sns

import (
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/awsbatch"
	"github.com/walpost/walpost/internal/publish/sinktest"
	"github.com/walpost/walpost/internal/publish/sns/snsfake"
)

// TestMain gives the SDK's default chain credentials, as a user's
// environment would, and keeps it off the instance metadata service.
func TestMain(m *testing.M) {
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID": "AKIDTEST", "AWS_SECRET_ACCESS_KEY": "walpost-test-secret",
		"AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": os.DevNull, "AWS_SHARED_CREDENTIALS_FILE": os.DevNull,
	} {
		os.Setenv(k, v)
	}
	os.Exit(m.Run())
}

var topicSeq atomic.Int64

func newTopic(srv *snsfake.Server, fifo bool) string {
	name := fmt.Sprintf("walpost-t%d", topicSeq.Add(1))
	if fifo {
		name += ".fifo"
	}
	srv.CreateTopic(name)
	return name
}

func newSink(t testing.TB, srv *snsfake.Server, name string, extra ...string) *Sink {
	t.Helper()
	return newSinkAt(t, srv.URL(), snsfake.ARN(name), extra...)
}

// newSinkAt is newSink against the SNS endpoint and topic ARN given.
func newSinkAt(t testing.TB, endpoint, arn string, extra ...string) *Sink {
	t.Helper()
	rest := strings.Join(extra, "\n")
	if !strings.Contains(rest, "max_retries:") {
		rest += "\nmax_retries: 0"
	}
	doc := fmt.Sprintf("name: sns\nkind: sns\nendpoint: %s\ntopic_arn: %q\n%s", endpoint, arn, rest)
	s, err := New(sinktest.SinkConfig(t, doc), zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s.(*Sink)
}

// read maps what topic holds back to outbox messages (see the sqs sink's
// tests: the same form).
func read(t testing.TB, srv *snsfake.Server, name string) []*message.Message {
	return asMessages(t, srv.Messages(name), strings.HasSuffix(name, ".fifo"))
}

// asMessages maps messages as a topic stored them back to outbox
// messages; of a FIFO topic it checks the group and deduplication ids.
func asMessages(t testing.TB, stored []snsfake.Message, fifo bool) []*message.Message {
	var out []*message.Message
	for _, sm := range stored {
		m := &message.Message{ID: sm.Attributes[awsbatch.AttrID], Type: sm.Attributes[awsbatch.AttrType], HasKey: true, Key: sm.Attributes[awsbatch.AttrKey]}
		if m.Key == "" {
			m.Key = m.ID
		}
		enc, encoded := sm.Attributes[awsbatch.AttrBodyEncoding]
		p, err := awsbatch.DecodeBody(sm.Body, enc)
		if err != nil {
			t.Fatal(err)
		}
		m.Payload, m.PayloadJSON = p, !encoded
		for k, v := range sm.Attributes {
			switch k {
			case awsbatch.AttrID, awsbatch.AttrType, awsbatch.AttrKey, awsbatch.AttrBodyEncoding:
				continue
			}
			if m.Headers == nil {
				m.Headers = map[string]string{}
			}
			m.Headers[k] = v
		}
		if fifo && (sm.GroupID != awsbatch.GroupID(m.Key) || sm.DedupID != m.ID) {
			t.Errorf("message %s: group %q, deduplication id %q", m.ID, sm.GroupID, sm.DedupID)
		}
		out = append(out, m)
	}
	return out
}

func harness(fifo bool) sinktest.Harness {
	return sinktest.Harness{
		// A FIFO topic's order is per group (awsbatch: one entry per group
		// a request); a standard topic of the stand-in keeps one order.
		Features: sinktest.Features{GlobalOrder: !fifo, BinaryPayload: true, MaxPayload: 200 << 10,
			OrderPerKeyUnderRefusal: true, RefusalOrderedPerDestination: fifo},
		// A topic per type ("<name>-{type}", ".fifo" for FIFO); the
		// stand-in refuses a marked message's entry alone
		// (InvalidParameter, a sender fault), the others of the request
		// stored.
		OpenRefusing: func(t *testing.T) *sinktest.Target {
			srv := snsfake.Start(t)
			srv.FailEntries(func(_, body string) (string, bool) {
				if strings.Contains(body, refuseMark) {
					return "InvalidParameter", true
				}
				return "", false
			})
			base := fmt.Sprintf("walpost-rf%d", topicSeq.Add(1))
			suffix := ""
			if fifo {
				suffix = ".fifo"
			}
			var topics []string
			for _, typ := range sinktest.RefusalTypes {
				topics = append(topics, base+"-"+typ+suffix)
				srv.CreateTopic(topics[len(topics)-1])
			}
			return &sinktest.Target{
				Sink: newSink(t, srv, base+"-{type}"+suffix),
				Read: func(t testing.TB) []*message.Message {
					var msgs []*message.Message
					for _, topic := range topics {
						msgs = append(msgs, read(t, srv, topic)...)
					}
					return msgs
				},
				Refuse: func(m *message.Message) { m.Payload = []byte(`{"` + refuseMark + `":"` + m.ID + `"}`) },
			}
		},
		Open: func(t *testing.T) *sinktest.Target {
			srv := snsfake.Start(t)
			name := newTopic(srv, fifo)
			return &sinktest.Target{
				Sink: newSink(t, srv, name),
				Read: func(t testing.TB) []*message.Message { return read(t, srv, name) },
				Outage: func(t testing.TB) func() {
					srv.Stop()
					return func() {
						if err := srv.Start(); err != nil {
							t.Fatal(err)
						}
					}
				},
			}
		},
	}
}

// refuseMark in a body makes the refusal harness's stand-in refuse it.
const refuseMark = "refuse-this-entry"

// TestIntegrationConformanceFIFO runs the sink conformance suite against a
// FIFO topic of the stand-in; the outage stops it and starts it again on
// its port, the topic kept.
func TestIntegrationConformanceFIFO(t *testing.T) {
	t.Parallel()
	sinktest.Run(t, harness(true))
}

// TestIntegrationConformanceStandard runs the suite against a standard
// topic.
func TestIntegrationConformanceStandard(t *testing.T) {
	t.Parallel()
	sinktest.Run(t, harness(false))
}

// TestIntegrationFailedEntriesArePartialAcksPerGroup: as for SQS, the
// entries SNS published are durable, on a FIFO topic per group only up to
// the group's failed entry; the retry's copy of a stored one is dropped
// by deduplication.
func TestIntegrationFailedEntriesArePartialAcksPerGroup(t *testing.T) {
	t.Parallel()
	srv := snsfake.Start(t)
	name := newTopic(srv, true)
	s := newSink(t, srv, name)
	g := sinktest.NewGen(2)
	a1, b1, a2, b2, a3 := g.Message("a"), g.Message("b"), g.Message("a"), g.Message("b"), g.Message("a")
	failing := string(a2.Payload)
	srv.FailEntries(func(_, body string) (string, bool) {
		if body == failing {
			return "InternalError", false
		}
		return "", false
	})
	err := s.Publish(sinktest.Context(t, 10*time.Second), []*message.Message{a1, b1, a2, b2, a3})
	sinktest.RequireTransient(t, err)
	done, _ := publish.DoneOf(err)
	if fmt.Sprint(done) != "[true true false true false]" {
		t.Fatalf("done %v", done)
	}
	srv.FailEntries(nil)
	if err := s.Publish(sinktest.Context(t, 10*time.Second), []*message.Message{a2, a3}); err != nil {
		t.Fatal(err)
	}
	if n := srv.Count(name); n != 5 {
		t.Fatalf("topic holds %d, want 5", n)
	}
}

// TestIntegrationMissingTopicAndThrottling: a fixed topic that does not
// exist is Permanent, a templated one Rejected; throttled answers are
// transient and ridden out by the SDK's retries.
func TestIntegrationMissingTopicAndThrottling(t *testing.T) {
	t.Parallel()
	srv := snsfake.Start(t)
	g := sinktest.NewGen(3)
	m := g.Message("k")
	sinktest.RequirePermanent(t, newSink(t, srv, "nope").Publish(sinktest.Context(t, 10*time.Second), []*message.Message{m}), "nope", "does not exist")
	err := newSink(t, srv, "t-{type}").Publish(sinktest.Context(t, 10*time.Second), []*message.Message{m})
	if !publish.IsRejected(err) {
		t.Fatalf("templated missing topic: %v", err)
	}
	name := newTopic(srv, true)
	srv.Throttle(1)
	sinktest.RequireTransient(t, newSink(t, srv, name).Publish(sinktest.Context(t, 10*time.Second), []*message.Message{m}))
	srv.Throttle(2)
	if err := newSink(t, srv, name, "max_retries: 3").Publish(sinktest.Context(t, 30*time.Second), []*message.Message{m}); err != nil {
		t.Fatal(err)
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	for _, c := range []struct{ doc, want string }{
		{"", "topic_arn: empty"},
		{"topic_arn: orders", "not an SNS topic ARN"},
		{"topic_arn: \"arn:aws:sns:{key}:1:t\"", "only the topic name"},
		{"topic_arn: arn:aws:sns:eu-central-1:1:a.b", "only a FIFO topic's"},
		{"topic_arn: arn:aws:sns:eu-central-1:1:t\nmax_message_bytes: 1", "max_message_bytes"},
	} {
		_, err := New(sinktest.SinkConfig(t, "name: s\nkind: sns\n"+c.doc), zerolog.Nop())
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %q", c.doc, err, c.want)
		}
	}
}
