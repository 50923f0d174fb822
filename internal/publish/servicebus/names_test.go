package servicebus

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/sinktest"
)

// TestEntityFromARowStaysOutOfTheControlPlane: a type or key may not
// choose a '$' entity ($management, $cbs), a path ('/' from a value:
// "orders/Subscriptions/x", "x/$management"), '?' or '#', or a character
// outside [a-zA-Z0-9._-]; a '/' in the template itself is the operator's.
func TestEntityFromARowStaysOutOfTheControlPlane(t *testing.T) {
	for _, c := range []struct {
		tmpl, typ string
		ok        bool
	}{
		{"{type}", "$management", false},
		{"{type}", "$cbs", false},
		{"outbox.{type}", "$management", false},
		{"{type}", "orders/Subscriptions/all", false},
		{"{type}", "orders/$management", false},
		{"outbox.{type}", "a/b", false},
		{"outbox.{type}", "a?x=1", false},
		{"outbox.{type}", "a#b", false},
		{"outbox.{type}", "a%2Fb", false},
		{"outbox.{type}", "a\\b", false},
		{"outbox.{type}", "x.", false}, // must end with a letter or digit
		{"{type}", "orders", true},
		{"outbox.{type}", "order.created", true},
		{"tenant/{type}", "orders", true},
	} {
		tmpl, err := parseEntity("entity", c.tmpl)
		if err != nil {
			t.Fatalf("%s: %v", c.tmpl, err)
		}
		name, err := tmpl.Expand(&message.Message{ID: "id", Type: c.typ})
		if c.ok != (err == nil) || err != nil && !errors.Is(err, errIllegalEntity) {
			t.Errorf("template %q, type %q: entity %q, error %v; want accepted %v", c.tmpl, c.typ, name, err, c.ok)
		}
	}
}

// TestIntegrationTemplatedEntityNotFoundRefusesTheMessage: with an entity
// template, an entity that does not exist refuses the message that chose
// it (Rejected: relay.on_refused decides), instead of stopping the relay
// for good, and the next message to an existing entity goes through; a
// fixed missing entity stays Permanent
// (TestIntegrationEntityNotFoundIsPermanent).
func TestIntegrationTemplatedEntityNotFoundRefusesTheMessage(t *testing.T) {
	parallel(t)
	needFake(t, "creates a queue per type")
	tg := newTarget(t, sbfake0)
	tg.fake.CreateQueue(t, "walpost.good", sbfake0)
	s := newSink(t, tg, `entity: "walpost.{type}"`)
	g := sinktest.NewGen(61)
	bad, ok := g.Message("k"), g.Message("k")
	bad.Type, ok.Type = fmt.Sprintf("missing%d", time.Now().UnixNano()), "good"
	err := s.Publish(sinktest.Context(t, 30*time.Second), []*message.Message{bad})
	if !publish.IsRejected(err) || !strings.Contains(err.Error(), bad.ID) || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("Publish to a missing templated entity = %v, want Rejected naming %s", err, bad.ID)
	}
	if err := s.Publish(sinktest.Context(t, 30*time.Second), []*message.Message{ok}); err != nil {
		t.Fatalf("the next message, to walpost.good: %v", err)
	}
	if n := len(tg.readAll(t, "walpost.good")); n != 1 {
		t.Fatalf("walpost.good holds %d messages, want 1", n)
	}
}
