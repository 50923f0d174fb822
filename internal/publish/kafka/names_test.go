package kafka

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish/sinktest"
)

// TestTopicFromARowIsNotAnInternalTopic: a type or key may not choose a
// topic that starts with "__" (Kafka's __consumer_offsets,
// __transaction_state), nor "." or "..", nor a character outside
// [a-zA-Z0-9._-], nor more than 249 characters; a template whose own
// leading text starts with "__" is the operator's choice.
func TestTopicFromARowIsNotAnInternalTopic(t *testing.T) {
	long := make([]byte, 250)
	for i := range long {
		long[i] = 'a'
	}
	for _, c := range []struct {
		tmpl, typ string
		ok        bool
	}{
		{"{type}", "__consumer_offsets", false},
		{"{type}", "__transaction_state", false},
		{"_{type}", "_consumer_offsets", false},
		{"{type}", ".", false},
		{"{type}", "..", false},
		{"{type}", "a/b", false},
		{"{type}", "a b", false},
		{"{type}", "$x", false},
		{"{type}", string(long), false},
		{"outbox.{type}", "../x", false},
		{"{type}", "orders", true},
		{"{type}", "_orders", true},
		{"{type}", "order.created", true},
		{"outbox.{type}", "__x", true}, // "outbox.__x": not an internal topic
		{"__walpost.{type}", "x", true},
	} {
		tmpl, err := parseTopic(c.tmpl)
		if err != nil {
			t.Fatalf("%s: %v", c.tmpl, err)
		}
		name, err := tmpl.Expand(&message.Message{ID: "id", Type: c.typ})
		if c.ok != (err == nil) || err != nil && !errors.Is(err, errIllegalTopic) {
			t.Errorf("template %q, type %q: topic %q, error %v; want accepted %v", c.tmpl, c.typ, name, err, c.ok)
		}
	}
}

// TestAutoCreateWithAnOpenTemplateWarns: auto_create_topics with a topic
// template that starts with a placeholder lets a row have the brokers
// create a topic of any name: the sink says so when configured; with a
// prefix it does not.
func TestAutoCreateWithAnOpenTemplateWarns(t *testing.T) {
	for _, c := range []struct {
		topic string
		warn  bool
	}{{"{type}", true}, {"outbox.{type}", false}} {
		var buf bytes.Buffer
		doc := fmt.Sprintf("name: events\nkind: kafka\nbrokers: [\"127.0.0.1:1\"]\ntopic: %q\nauto_create_topics: true\n", c.topic)
		s, err := New(sinktest.SinkConfig(t, doc), zerolog.New(&buf))
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		if got := strings.Contains(buf.String(), "a topic of any name"); got != c.warn {
			t.Errorf("topic %q: warned %v, want %v\n%s", c.topic, got, c.warn, buf.String())
		}
	}
}
