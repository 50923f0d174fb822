package publish

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/message"
)

// plain records what it publishes; it does not schedule.
type plain struct{ got []string }

func (p *plain) Name() string { return "plain" }
func (p *plain) Close() error { return nil }
func (p *plain) Publish(_ context.Context, msgs []*message.Message) error {
	for _, m := range msgs {
		p.got = append(p.got, m.ID)
	}
	return nil
}

// TestPublishOnTimeRefusesWhatWouldGoEarly: a sink that cannot schedule
// publishes the messages before one whose deliver_at is still to come,
// and that one is refused (Rejected, the others durable); a deliver_at
// past goes as any message.
func TestPublishOnTimeRefusesWhatWouldGoEarly(t *testing.T) {
	now := time.Now()
	msgs := []*message.Message{{ID: "1", DeliverAt: now.Add(-time.Second)}, {ID: "2"}, {ID: "3", DeliverAt: now.Add(time.Minute)}, {ID: "4"}}
	var p plain
	err := PublishOnTime(context.Background(), &p, msgs, now)
	done, ok := DoneOf(err)
	if !IsRejected(err) || !errors.Is(err, ErrTooEarly) || !ok || len(done) != 4 || !done[0] || !done[1] || done[2] || done[3] ||
		strings.Join(p.got, ",") != "1,2" || !strings.Contains(err.Error(), "message 3") {
		t.Fatalf("err %v, done %v, published %v", err, done, p.got)
	}
	p.got = nil
	if err := PublishOnTime(context.Background(), &p, msgs[3:], now); err != nil || strings.Join(p.got, ",") != "4" {
		t.Fatalf("err %v, published %v", err, p.got)
	}
	if Schedules(&p) {
		t.Fatal("a sink without Schedules schedules")
	}
}

// TestPrepareRefusesDeliverAtForKindsThatCannotSchedule: with
// columns.deliver_at mapped, a kind that never registered scheduling is a
// configuration error naming the sink and the property.
func TestPrepareRefusesDeliverAtForKindsThatCannotSchedule(t *testing.T) {
	Register("test-noschedule", FactoryOf(func(*config.Sink, zerolog.Logger) (Sink, error) { return &plain{}, nil }))
	cfg := &config.Sink{Name: "x", Kind: "test-noschedule", DeliverAt: true}
	if _, err := Prepare(2, cfg, zerolog.Nop()); err == nil || !strings.Contains(err.Error(), "sinks[2].kind: sink x") || !strings.Contains(err.Error(), "columns.deliver_at") {
		t.Fatalf("err %v", err)
	}
	cfg.DeliverAt = false
	if _, err := Prepare(2, cfg, zerolog.Nop()); err != nil {
		t.Fatal(err)
	}
}
