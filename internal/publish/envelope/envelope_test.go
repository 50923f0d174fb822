package envelope_test

import (
	"testing"
	"time"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish/envelope"
	"github.com/walpost/walpost/internal/publish/envelope/cetest"
)

func TestSettingsDefaultsAndErrorsNameTheField(t *testing.T) {
	var s envelope.Settings
	s.SetDefaults()
	if s.Format != envelope.Raw || s.Source != "" || s.Validate() != nil {
		t.Errorf("zero settings became %+v", s)
	}
	s = envelope.Settings{Format: envelope.CloudEvents}
	s.SetDefaults()
	if s.Source != envelope.DefaultSource || s.Validate() != nil {
		t.Errorf("cloudevents without source became %+v", s)
	}
	for _, c := range []struct {
		s    envelope.Settings
		want string
	}{
		{envelope.Settings{Format: "json"}, `format: unknown "json" (raw or cloudevents)`},
		{envelope.Settings{Format: envelope.Raw, Source: "/x"}, "source: only used with format: cloudevents"},
		{envelope.Settings{Format: envelope.CloudEvents, Source: "%zz"}, `source: "%zz" is not a URI reference (e.g. /orders-service or urn:example:orders)`},
	} {
		if err := c.s.Validate(); err == nil || err.Error() != c.want {
			t.Errorf("%+v: got %v, want %q", c.s, err, c.want)
		}
	}
}

// TestAttributesDecodeWithTheSDK hands the attributes, under the Kafka
// and AMQP bindings' prefixes, to the CloudEvents Go SDK (cetest).
func TestAttributesDecodeWithTheSDK(t *testing.T) {
	s := envelope.Settings{Format: envelope.CloudEvents, Source: "urn:example:orders"}
	m := &message.Message{ID: "0190f5c2-6a8e-7cc0-9a4e-0e7d6c1b2a31", Type: "order.created", Payload: []byte(`{"a":1}`), PayloadJSON: true,
		CommitTime: time.Date(2026, 12, 3, 9, 5, 49, 123456000, time.UTC)}
	for _, prefix := range []string{cetest.PrefixKafka, cetest.PrefixAMQP, cetest.PrefixHTTP} {
		b := &cetest.Binary{Prefix: prefix, ContentType: envelope.ContentType(m), Data: m.Payload}
		for _, a := range s.Attributes(m) {
			b.Headers = append(b.Headers, cetest.Header{Name: prefix + a.Name, Value: a.Value})
		}
		e, err := b.Event()
		if err != nil {
			t.Fatalf("%s: %v", prefix, err)
		}
		if e.ID() != m.ID || e.Source() != s.Source || e.Type() != m.Type || !e.Time().Equal(m.CommitTime) ||
			e.DataContentType() != "application/json" || string(e.Data()) != `{"a":1}` {
			t.Errorf("%s: decoded %s", prefix, e)
		}
	}
}

// TestHasPrefixFold: a prefix in any case, and nothing shorter than it.
func TestHasPrefixFold(t *testing.T) {
	for _, c := range []struct {
		s, prefix string
		want      bool
	}{
		{"ce-id", "ce-", true}, {"CE-Id", "ce-", true}, {"cloudevents:type", "cloudEvents:", true},
		{"ce", "ce-", false}, {"xce-id", "ce-", false}, {"", "ce-", false}, {"anything", "", true},
	} {
		if got := envelope.HasPrefixFold(c.s, c.prefix); got != c.want {
			t.Errorf("HasPrefixFold(%q, %q) = %v, want %v", c.s, c.prefix, got, c.want)
		}
	}
}
