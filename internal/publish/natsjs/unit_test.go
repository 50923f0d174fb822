package natsjs

import (
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/envelope"
	"github.com/walpost/walpost/internal/publish/sinktest"
)

func testMessage() *message.Message {
	return &message.Message{
		ID: "0190f1c2-7a3b-7c4d-8e5f-6a7b8c9d0e1f", Type: "order.created", Key: "order-1", HasKey: true,
		Payload: []byte(`{"a":1}`), PayloadJSON: true,
		Headers: map[string]string{
			"traceparent": "00-abc-def-01", "X-Tenant": "acme",
			"Nats-Rollup": "all", "nats-ttl": "1s", "Walpost-Type": "forged", "ce-id": "x", "Content-Type": "text/plain",
		},
		CommitTime: time.Date(2026, 12, 3, 9, 8, 16, 123456000, time.UTC),
	}
}

// TestRawHeaderMapping: format raw sets Nats-Msg-Id, Walpost-Type and
// Walpost-Key, keeps the headers column with its case, and leaves out
// every Nats-* and Walpost-* header of the column (the server acts on
// Nats-Rollup and Nats-TTL); ce-* and Content-Type pass in raw.
func TestRawHeaderMapping(t *testing.T) {
	env := envelope.Settings{}
	env.SetDefaults()
	m := testMessage()
	nm, err := natsMsg(m, "outbox.order.created", &env)
	if err != nil {
		t.Fatal(err)
	}
	want := nats.Header{
		"Nats-Msg-Id": {m.ID}, "Walpost-Type": {"order.created"}, "Walpost-Key": {"order-1"},
		"traceparent": {"00-abc-def-01"}, "X-Tenant": {"acme"}, "ce-id": {"x"}, "Content-Type": {"text/plain"},
	}
	if !maps.EqualFunc(nm.Header, want, func(a, b []string) bool { return strings.Join(a, "|") == strings.Join(b, "|") }) {
		t.Errorf("headers %v, want %v", nm.Header, want)
	}
	if string(nm.Data) != `{"a":1}` || nm.Subject != "outbox.order.created" {
		t.Errorf("data %q subject %q", nm.Data, nm.Subject)
	}
	m.HasKey, m.Key = false, ""
	m.Payload = nil
	nm, _ = natsMsg(m, "s", &env)
	if _, ok := nm.Header[HeaderKey]; ok || nm.Data == nil || len(nm.Data) != 0 {
		t.Errorf("NULL key: headers %v, data %v", nm.Header, nm.Data)
	}
}

// TestCloudEventsHeaderMapping: format cloudevents sets ce-specversion,
// ce-id, ce-source, ce-type, ce-time and content-type (in lower case: NATS
// headers are case-sensitive, and the CloudEvents NATS binding looks for
// "content-type") from envelope.Attributes and ContentType, keeps
// Nats-Msg-Id (the duplicate window) and drops ce-* and Content-Type (any
// case) of the headers column.
func TestCloudEventsHeaderMapping(t *testing.T) {
	env := envelope.Settings{Format: envelope.CloudEvents, Source: "/orders"}
	env.SetDefaults()
	m := testMessage()
	nm, err := natsMsg(m, "s", &env)
	if err != nil {
		t.Fatal(err)
	}
	want := nats.Header{
		"Nats-Msg-Id": {m.ID}, "Walpost-Key": {"order-1"},
		"ce-specversion": {"1.0"}, "ce-id": {m.ID}, "ce-source": {"/orders"}, "ce-type": {"order.created"},
		"ce-time": {"2026-12-03T09:08:16.123456Z"}, "content-type": {"application/json"},
		"traceparent": {"00-abc-def-01"}, "X-Tenant": {"acme"},
	}
	if !maps.EqualFunc(nm.Header, want, func(a, b []string) bool { return strings.Join(a, "|") == strings.Join(b, "|") }) {
		t.Errorf("headers %v, want %v", nm.Header, want)
	}
	m.PayloadJSON = false
	nm, _ = natsMsg(m, "s", &env)
	if got := nm.Header["content-type"]; len(got) != 1 || got[0] != "application/octet-stream" {
		t.Errorf("binary payload: content-type %q", got)
	}
	m.Headers["CONTENT-TYPE"] = "text/plain"
	nm, _ = natsMsg(m, "s", &env)
	if got := nm.Header["CONTENT-TYPE"]; got != nil {
		t.Errorf("CONTENT-TYPE of the headers column kept: %q", got)
	}
}

// TestBadHeaderNameOrSubjectIsRejectedBeforeSending: a header name NATS
// cannot carry and a type that makes an illegal subject are Rejected,
// naming the message, before anything is sent (the sink is not even
// connected: its server does not exist).
func TestBadHeaderNameOrSubjectIsRejectedBeforeSending(t *testing.T) {
	s := newSink(t, "servers: [\"nats://127.0.0.1:1\"]\nsubject: outbox.{type}\n")
	g := sinktest.NewGen(1)
	bad := g.Message("k")
	bad.Headers["bad header"] = "v"
	sp := g.Message("k")
	sp.Type = "order created"
	wild := g.Message("k")
	wild.Type = "order.*"
	for _, m := range []*message.Message{bad, sp, wild} {
		err := s.Publish(t.Context(), []*message.Message{g.Message("k"), m})
		if !publish.IsRejected(err) || !strings.Contains(err.Error(), m.ID) {
			t.Errorf("type %q headers %v: %v, want Rejected naming %s", m.Type, m.Headers, err, m.ID)
		}
	}
}

// TestHeaderValuesNATSWouldChangeAreRejectedBeforeSending: nats.go trims
// white space around a header value and turns line breaks into spaces, so
// a headers-column value, key, type or id with those would reach the
// receiver changed: the message is Rejected, naming it and the header,
// before anything is sent. White space inside a value passes.
func TestHeaderValuesNATSWouldChangeAreRejectedBeforeSending(t *testing.T) {
	s := newSink(t, "servers: [\"nats://127.0.0.1:1\"]\nsubject: outbox.fixed\n")
	g := sinktest.NewGen(2)
	var bad []*message.Message
	for _, v := range []string{" lead", "trail ", "tab\t", "a\nb", "a\r\nb"} {
		col := g.Message("k")
		col.Headers["X-Tenant"] = v
		key := g.Message(v)
		typ := g.Message("k")
		typ.Type = v
		bad = append(bad, col, key, typ)
	}
	for _, m := range bad {
		err := s.Publish(t.Context(), []*message.Message{g.Message("k"), m})
		if !publish.IsRejected(err) || !strings.Contains(err.Error(), m.ID) {
			t.Errorf("key %q type %q headers %q: %v, want Rejected naming %s", m.Key, m.Type, m.Headers, err, m.ID)
		}
	}
	env := envelope.Settings{}
	env.SetDefaults()
	m := g.Message("order 1")
	m.Headers["X-Tenant"] = "acme corp"
	nm, err := natsMsg(m, "s", &env)
	if err != nil || nm.Header[HeaderKey][0] != "order 1" || nm.Header["X-Tenant"][0] != "acme corp" {
		t.Errorf("inner white space: %v, headers %v", err, nm.Header)
	}
}

// TestUnreachableServerIsTransient: a server that refuses connections is
// an error the relay retries, not Permanent.
func TestUnreachableServerIsTransient(t *testing.T) {
	s := newSink(t, "servers: [\"nats://127.0.0.1:1\"]\nsubject: outbox.{type}\n")
	err := s.Publish(t.Context(), []*message.Message{sinktest.NewGen(1).Message("k")})
	if err == nil || publish.IsPermanent(err) {
		t.Fatalf("Publish = %v, want a transient error", err)
	}
}
