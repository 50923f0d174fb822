package natsjs

import (
	"errors"
	"strings"
	"testing"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/sinktest"
)

// TestSubjectFromARowStaysOutOfTheControlPlane: a type or key may only
// choose a subject inside the template's namespace: none that starts with
// '$' ($JS.API, $SYS, $KV) or _INBOX, no token of its own starting with
// '$', no wildcard, no empty token, no white space. A template whose own
// leading text is in the '$' namespace is the operator's choice. Dotted
// types make several tokens under the prefix (docs/security.md).
func TestSubjectFromARowStaysOutOfTheControlPlane(t *testing.T) {
	for _, c := range []struct {
		tmpl, typ, key string
		ok             bool
	}{
		{"{type}", "$JS.API.STREAM.PURGE.victim", "k", false},
		{"{type}", "$JS.API.STREAM.DELETE.victim", "k", false},
		{"{type}", "$SYS.REQ.SERVER.PING", "k", false},
		{"{type}", "$KV.bucket.key", "k", false},
		{"{type}", "_INBOX.abc", "k", false},
		{"{type}", "_INBOX", "k", false},
		{"_IN{type}", "BOX.abc", "k", false},
		{"{type}.events", "$JS.API.STREAM.PURGE.victim", "k", false},
		{"outbox.{type}", "$JS.API.STREAM.PURGE.victim", "k", false},
		{"outbox.{type}", "order.$x", "k", false},
		{"outbox.{type}", "order.*", "k", false},
		{"outbox.{type}", ">", "k", false},
		{"outbox.{type}", "order..created", "k", false},
		{"outbox.{type}", ".order", "k", false},
		{"outbox.{type}", "order.", "k", false},
		{"outbox.{type}", "", "k", false},
		{"outbox.{type}", "order created", "k", false},
		{"outbox.{type}", "order\tcreated", "k", false},
		{"outbox.{key}", "t", "$JS.API.INFO", false},
		{"outbox.{key}", "t", "a.>", false},
		{"outbox.{type}.{key}", "order", "", false},
		// Allowed: under the operator's prefix, or the operator's own '$'.
		{"outbox.{type}", "order.created", "k", true},
		{"outbox.{type}", "order_$", "k", true},
		{"{type}", "orders", "k", true},
		{"{type}", "_inbox.x", "k", true},
		{"outbox.{key}", "t", "tenant-1.order-7", true},
		{"$JS.EVENT.{type}", "x", "k", true},
		{"{type}.x", "order", "k", true},
	} {
		tmpl, err := parseSubject(c.tmpl)
		if err != nil {
			t.Fatalf("%s: %v", c.tmpl, err)
		}
		m := &message.Message{ID: "id", Type: c.typ, Key: c.key, HasKey: true}
		name, err := tmpl.Expand(m)
		if c.ok != (err == nil) || err != nil && !errors.Is(err, errIllegalSubject) {
			t.Errorf("template %q, type %q, key %q: subject %q, error %v; want accepted %v", c.tmpl, c.typ, c.key, name, err, c.ok)
		}
	}
}

// TestPurgeSubjectFromARowIsRejectedBeforeSending: through Publish, a
// row of type $JS.API.STREAM.PURGE.<stream> with subject "{type}" is
// refused (Rejected, so relay.on_refused decides), naming the message,
// before anything is sent: the server does not even exist.
func TestPurgeSubjectFromARowIsRejectedBeforeSending(t *testing.T) {
	s := newSink(t, "servers: [\"nats://127.0.0.1:1\"]\nsubject: \"{type}\"\n")
	g := sinktest.NewGen(1)
	m := g.Message("k")
	m.Type = "$JS.API.STREAM.PURGE.victim"
	err := s.Publish(t.Context(), []*message.Message{m})
	if !publish.IsRejected(err) || !strings.Contains(err.Error(), m.ID) || !strings.Contains(err.Error(), "'$'") {
		t.Fatalf("Publish = %v, want Rejected naming %s and the '$'", err, m.ID)
	}
}
