package rabbitmq

import (
	"context"
	"fmt"
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

// TestExpirationAndDelayHeader: expires_at becomes the expiration in
// milliseconds; with the delayed-message exchange a deliver_at still to
// come becomes x-delay in milliseconds, rounded up.
func TestExpirationAndDelayHeader(t *testing.T) {
	now := time.Now()
	m := &message.Message{ID: "0190f1c2-7a3b-7c4d-8e5f-6a7b8c9d0e1f", Type: "t", Payload: []byte(`{}`), PayloadJSON: true,
		ExpiresAt: now.Add(time.Hour)}
	p := Publishing(m, &envelope.Settings{Format: envelope.Raw})
	var ms int64
	if _, err := fmt.Sscan(p.Expiration, &ms); err != nil || ms <= 3590_000 || ms > 3600_000 {
		t.Fatalf("expiration %q, want about 3600000", p.Expiration)
	}
	if p := Publishing(&message.Message{ID: m.ID, Type: "t"}, &envelope.Settings{Format: envelope.Raw}); p.Expiration != "" {
		t.Fatalf("expiration %q without expires_at", p.Expiration)
	}
	m.DeliverAt = now.Add(2500 * time.Microsecond)
	if err := Delay(&p, m, now); err != nil {
		t.Fatal(err)
	}
	if got := p.Headers[HeaderDelay]; got != int64(3) {
		t.Fatalf("x-delay %v (%T), want 3 (ms, rounded up)", got, got)
	}
	q := Publishing(&message.Message{ID: m.ID, Type: "t", DeliverAt: now.Add(-time.Second)}, &envelope.Settings{Format: envelope.Raw})
	if err := Delay(&q, &message.Message{DeliverAt: now.Add(-time.Second)}, now); err != nil {
		t.Fatal(err)
	}
	if _, ok := q.Headers[HeaderDelay]; ok {
		t.Fatal("x-delay set for a deliver_at past")
	}
}

// TestFarFutureExpiryAndDelayAreBounded: an expires_at further ahead than
// RabbitMQ's longest expiration (2^32-1 ms) is sent without one, never a
// value the broker answers with 406; a deliver_at further ahead than the
// longest x-delay is refused (publish.Rejected), never sent early.
func TestFarFutureExpiryAndDelayAreBounded(t *testing.T) {
	now := time.Now()
	for _, at := range []time.Time{time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC), now.AddDate(300, 0, 0), now.Add(MaxExpiry + time.Second)} {
		m := &message.Message{ID: "0190f1c2-7a3b-7c4d-8e5f-6a7b8c9d0e1f", Type: "t", ExpiresAt: at}
		if p := Publishing(m, &envelope.Settings{Format: envelope.Raw}); p.Expiration != "" {
			t.Errorf("expires_at %s: expiration %q, want none", at, p.Expiration)
		}
		var p amqp.Publishing
		if err := Delay(&p, &message.Message{ID: m.ID, Type: "t", DeliverAt: at}, now); !publish.IsRejected(err) || p.Headers[HeaderDelay] != nil {
			t.Errorf("deliver_at %s: %v, x-delay %v; want a refusal and none", at, err, p.Headers[HeaderDelay])
		}
	}
	m := &message.Message{ID: "0190f1c2-7a3b-7c4d-8e5f-6a7b8c9d0e1f", Type: "t", ExpiresAt: now.Add(MaxExpiry - time.Minute)}
	if p := Publishing(m, &envelope.Settings{Format: envelope.Raw}); p.Expiration == "" {
		t.Error("an expiration just under the maximum was left out")
	}
}

// TestDeliverAtNeedsTheDelayedExchange: columns.deliver_at with any other
// exchange type is a configuration error saying what to set; with
// x-delayed-message the sink schedules.
func TestDeliverAtNeedsTheDelayedExchange(t *testing.T) {
	cfg := sinktest.SinkConfig(t, "name: r\nkind: rabbitmq\nurl: amqp://127.0.0.1/\nexchange: x\n")
	cfg.DeliverAt = true
	if _, err := New(cfg, zerolog.Nop()); err == nil || !strings.Contains(err.Error(), "exchange_type: x-delayed-message") {
		t.Fatalf("error %v, want one naming exchange_type: x-delayed-message", err)
	}
	cfg = sinktest.SinkConfig(t, "name: r\nkind: rabbitmq\nurl: amqp://127.0.0.1/\nexchange: x\nexchange_type: x-delayed-message\ndelayed_type: direct\n")
	cfg.DeliverAt = true
	s, err := New(cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.(*Sink).Schedules() {
		t.Fatal("a sink on the delayed-message exchange does not schedule")
	}
	cfg = sinktest.SinkConfig(t, "name: r\nkind: rabbitmq\nurl: amqp://127.0.0.1/\nexchange: x\ndelayed_type: direct\n")
	if _, err := New(cfg, zerolog.Nop()); err == nil || !strings.Contains(err.Error(), "delayed_type") {
		t.Fatalf("error %v, want one about delayed_type without x-delayed-message", err)
	}
}

// TestPreconditionFailedOnPublishRefusesTheMessage: RabbitMQ closing the
// channel with 406 over a publish (an expiration or x-delay it does not
// take, a body over max_message_size) is that message's refusal
// (publish.Rejected: relay.on_refused applies), not a stop no policy
// gets past; other codes keep their verdicts.
func TestPreconditionFailedOnPublishRefusesTheMessage(t *testing.T) {
	s := &Sink{}
	m := &message.Message{ID: "0190f1c2-7a3b-7c4d-8e5f-6a7b8c9d0e1f", Type: "t"}
	o := &outgoing{exchange: "x", key: "t"}
	err := s.publishFailure(context.Background(), &amqp.Error{Code: amqp.PreconditionFailed, Reason: "PRECONDITION_FAILED - invalid expiration"}, m, o)
	if !publish.IsRejected(err) || !strings.Contains(err.Error(), "on_refused") {
		t.Fatalf("406 on publish: %v, want a refusal naming relay.on_refused", err)
	}
	if err := s.publishFailure(context.Background(), &amqp.Error{Code: amqp.AccessRefused}, m, o); publish.IsRejected(err) || !publish.IsPermanent(err) {
		t.Fatalf("403 on publish: %v, want permanent, not a refusal", err)
	}
	if err := s.publishFailure(context.Background(), amqp.ErrClosed, m, o); publish.IsPermanent(err) {
		t.Fatalf("a closed channel: %v, want a retry", err)
	}
}
