package servicebus

import (
	"errors"
	"testing"

	"github.com/walpost/walpost/internal/message"
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
