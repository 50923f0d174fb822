package rabbitmq

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/envelope"
	"github.com/walpost/walpost/internal/publish/sinktest"
)

// openConfig decodes, defaults and validates a rabbitmq sink's settings
// (body is the YAML after name and kind) and builds the sink.
func openConfig(t *testing.T, body string) (*Sink, error) {
	t.Helper()
	s, err := New(sinktest.SinkConfig(t, "name: events\nkind: rabbitmq\n"+body), zerolog.Nop())
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { s.Close() })
	return s.(*Sink), nil
}

// TestConfigDefaults: the defaults the reference promises.
func TestConfigDefaults(t *testing.T) {
	s, err := openConfig(t, "url: amqp://guest:guest@127.0.0.1:5672/\nexchange: outbox\n")
	if err != nil {
		t.Fatal(err)
	}
	if s.routingKey.Text() != "{type}" || s.declare || s.exchangeType != "topic" || s.maxInFlight != 1000 ||
		s.maxBytes != 16<<20 || s.timeout != 10*time.Second || s.dialer.heartbeat != 10*time.Second ||
		s.env.Format != envelope.Raw || s.dialer.tls != nil || s.vhost != "/" {
		t.Errorf("defaults: %+v", s)
	}
}

// TestConfigErrorsNameTheField: each bad setting is refused with an error
// starting at the field, through the registry as the relay prepares sinks.
func TestConfigErrorsNameTheField(t *testing.T) {
	const ok = "url: amqp://guest:guest@127.0.0.1:5672/\nexchange: outbox\n"
	for _, c := range []struct{ body, want string }{
		{"exchange: outbox\n", "sinks[0] (events): url: empty"},
		{"url: http://h/\nexchange: x\n", "sinks[0] (events): url: http://h/ is not an AMQP URL"},
		{"url: amqp://guest:guest@127.0.0.1:5672/\n", "sinks[0] (events): exchange: empty"},
		{ok + "routing_key: \"{tpye}\"\n", "routing_key: \"{tpye}\" has the unknown placeholder"},
		{"url: amqp://h/\nexchange: \"orders/{type}\"\n", "exchange: template \"orders/{type}\""},
		{"url: amqp://h/\nexchange: \"amq.topic\"\ndeclare_exchange: true\n", "exchange: \"amq.topic\" starts with amq."},
		{ok + "exchange_type: fan\n", "exchange_type: \"fan\""},
		{ok + "max_in_flight: -1\n", "max_in_flight: -1 is outside"},
		{ok + "max_message_bytes: 10\n", "max_message_bytes: 10 is outside"},
		{ok + "timeout: 1ms\n", "timeout: 1ms is outside"},
		{ok + "heartbeat: 1h\n", "heartbeat: 1h0m0s is outside"},
		{ok + "tls: {ca_file: ca.pem}\n", "tls.ca_file: set, but url is amqp://"},
		{"url: amqps://h/\nexchange: x\ntls: {cert_file: c.pem}\n", "tls.key_file: empty"},
		{"url: amqps://h/\nexchange: x\ntls: {ca_file: /nonexistent/ca.pem}\n", "tls.ca_file: open /nonexistent/ca.pem"},
		{ok + "format: xml\n", "format: unknown \"xml\""},
		{ok + "source: /orders\n", "source: only used with format: cloudevents"},
		{ok + "mandatory: false\n", "mandatory"},
	} {
		doc := "name: events\nkind: rabbitmq\n" + c.body
		_, err := publish.Prepare(0, sinktest.SinkConfig(t, doc), zerolog.Nop())
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: err = %v, want one containing %q", c.body, err, c.want)
		}
	}
}

// TestConfigTLS: amqps:// turns TLS on with the files given, and
// server_name overrides the host.
func TestConfigTLS(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.pem")
	if err := os.WriteFile(bad, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := openConfig(t, fmt.Sprintf("url: amqps://h/\nexchange: x\ntls: {ca_file: %q}\n", bad)); err == nil ||
		!strings.Contains(err.Error(), "tls.ca_file: no PEM certificate") {
		t.Errorf("a CA file without a certificate: %v", err)
	}
	s, err := openConfig(t, "url: amqps://h:5671/v\nexchange: x\ntls: {server_name: rabbit.internal, insecure_skip_verify: true}\n")
	if err != nil {
		t.Fatal(err)
	}
	if tc := s.dialer.tls; tc == nil || tc.ServerName != "rabbit.internal" || !tc.InsecureSkipVerify || s.vhost != "v" {
		t.Errorf("tls = %+v, vhost %q", tc, s.vhost)
	}
}

// TestPublishingMapsEveryProperty: the mapping of the package doc, in raw
// format: persistent, message_id, type, content_type by payload, commit
// time, app_id, headers with the ordering key (the message's own key wins
// over a "key" entry, and a NULL key is left out), the body as stored.
func TestPublishingMapsEveryProperty(t *testing.T) {
	commit := time.Date(2026, 3, 4, 5, 6, 7, 890_000_000, time.UTC)
	m := &message.Message{ID: "0190f6c4-0000-7000-8000-000000000001", Type: "order.created", Key: "order-1", HasKey: true,
		Payload: []byte(`{"a":1}`), PayloadJSON: true, Headers: map[string]string{"traceparent": "00-abc-def-01", "key": "theirs"},
		CommitTime: commit}
	env := envelope.Settings{}
	env.SetDefaults()
	p := Publishing(m, &env)
	want := amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, MessageId: m.ID,
		Type: m.Type, Timestamp: commit, AppId: "walpost", Body: m.Payload,
		Headers: amqp.Table{"traceparent": "00-abc-def-01", "key": "order-1"}}
	if fmt.Sprint(p) != fmt.Sprint(want) {
		t.Errorf("Publishing =\n%+v\nwant\n%+v", p, want)
	}
	if err := p.Headers.Validate(); err != nil {
		t.Errorf("headers are not a valid AMQP table: %v", err)
	}

	m2 := &message.Message{ID: "id-2", Type: "blob", Payload: []byte{0, 0xff}}
	p = Publishing(m2, &env)
	if p.ContentType != "application/octet-stream" || p.Headers != nil || !p.Timestamp.IsZero() {
		t.Errorf("binary payload, NULL key, no headers: %+v", p)
	}
	if p = Publishing(&message.Message{ID: "id-3", Type: "t"}, &env); p.Body == nil {
		t.Error("a nil payload is sent as a nil body; want an empty one")
	}
}

// TestPublishingCloudEventsAttributes: format: cloudevents adds the
// attributes of envelope.Attributes as cloudEvents:-prefixed headers,
// and the key as cloudEvents:partitionkey, drops a headers entry posing as
// an attribute (any case), content_type per envelope.ContentType, the
// payload as body.
func TestPublishingCloudEventsAttributes(t *testing.T) {
	commit := time.Date(2026, 3, 4, 5, 6, 7, 890_000_000, time.UTC)
	m := &message.Message{ID: "id-1", Type: "order.created", Key: "order-1", HasKey: true, Payload: []byte(`{"a":1}`), PayloadJSON: true,
		Headers: map[string]string{"traceparent": "00-abc-def-01", "CloudEvents:id": "forged"}, CommitTime: commit}
	env := envelope.Settings{Format: envelope.CloudEvents, Source: "/orders"}
	env.SetDefaults()
	p := Publishing(m, &env)
	want := amqp.Table{
		"cloudEvents:specversion":  "1.0",
		"cloudEvents:id":           "id-1",
		"cloudEvents:source":       "/orders",
		"cloudEvents:type":         "order.created",
		"cloudEvents:time":         "2026-03-04T05:06:07.89Z",
		"cloudEvents:partitionkey": "order-1",
		"key":                      "order-1",
		"traceparent":              "00-abc-def-01",
	}
	if fmt.Sprint(p.Headers) != fmt.Sprint(want) {
		t.Errorf("headers = %v, want %v", p.Headers, want)
	}
	if p.ContentType != "application/json" || string(p.Body) != `{"a":1}` {
		t.Errorf("content type %q, body %q", p.ContentType, p.Body)
	}
}

// TestIllegalNamesAreRejectedBeforeAnythingIsSent: a message whose type
// makes an exchange name AMQP does not allow, or whose body is over
// max_message_bytes, fails the call with a Rejected error naming it, with
// no connection attempted (the URL points nowhere).
func TestIllegalNamesAreRejectedBeforeAnythingIsSent(t *testing.T) {
	s, err := openConfig(t, "url: amqp://guest:guest@127.0.0.1:1/\nexchange: \"outbox.{type}\"\nmax_message_bytes: 1024\n")
	if err != nil {
		t.Fatal(err)
	}
	g := sinktest.NewGen(1)
	bad := g.Message("k")
	bad.Type = "order/created"
	err = s.Publish(t.Context(), []*message.Message{g.Message("k"), bad})
	if !publish.IsRejected(err) || !strings.Contains(err.Error(), bad.ID) || !errors.Is(err, errIllegalExchange) {
		t.Errorf("illegal exchange: %v", err)
	}
	big := g.SizedMessage("k", 2048)
	err = s.Publish(t.Context(), []*message.Message{big})
	if !publish.IsRejected(err) || !strings.Contains(err.Error(), "max_message_bytes") {
		t.Errorf("large message: %v", err)
	}
}
