package pipeline

import (
	"context"
	"fmt"
	"time"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/message"
)

// ErrExpired is the cause recorded for a message parked by
// relay.on_expired: dead_letter.
type ErrExpired struct {
	ExpiresAt, At time.Time
}

func (e *ErrExpired) Error() string {
	return fmt.Sprintf("expired: its expires_at %s had passed when the relay read it at %s (relay.on_expired: dead_letter); "+
		"cdc dead-letter resend publishes it all the same, without its expiry",
		e.ExpiresAt.UTC().Format(time.RFC3339Nano), e.At.UTC().Format(time.RFC3339Nano))
}

// unlessExpired applies relay.on_expired to m, routed to p.targets
// (docs/design.md, "Scheduled delivery and expiry"): it returns the
// message to deliver, or nil when there is none (dropped or parked; its
// transaction is confirmed without it). A message that has not expired
// is returned as it is; one sent anyway (send) goes without its expiry,
// so that no sink gives it a time to live already over.
func (p *Pipeline) unlessExpired(ctx context.Context, m *message.Message) (*message.Message, error) {
	now := p.now()
	if !m.Expired(now) {
		return m, nil
	}
	ev := p.log.Warn().Str("msg_id", m.ID).Str("trace_id", m.TraceID()).Str("type", m.Type).Str("lsn", m.LSN.String()).Uint32("seq", m.Seq).
		Time("expires_at", m.ExpiresAt)
	if !m.DeliverAt.IsZero() {
		ev = ev.Time("deliver_at", m.DeliverAt)
	}
	switch p.onExpired {
	case config.ExpiredSend:
		p.metrics.ExpiredSent.Inc()
		ev.Msg("message expired before the relay reached it; sent all the same, without a time to live (relay.on_expired: send)")
		c := *m // messages are shared read-only: a copy without the expiry
		c.ExpiresAt = time.Time{}
		return &c, nil
	case config.ExpiredDeadLetter:
		cause := &ErrExpired{ExpiresAt: m.ExpiresAt, At: now}
		for _, i := range p.targets {
			if err := p.expired.ParkRefused(ctx, p.sinkNames[i], m, cause); err != nil {
				return nil, err
			}
		}
		p.metrics.ExpiredParked.Inc()
		ev.Msg("message expired before the relay reached it; parked in the dead-letter table for each of its sinks, not published (relay.on_expired: dead_letter)")
		return nil, nil
	}
	p.metrics.ExpiredDropped.Inc()
	ev.Msg("message expired before the relay reached it; dropped, not published (relay.on_expired: drop)")
	return nil, nil
}
