package file

import (
	"context"

	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
)

// DiscardSink acknowledges every message at once and keeps nothing. It
// exists to measure the relay without a destination (the benchmark's
// walpost→discard row); it is never what a deployment wants. It accepts
// format and source like every sink (checked, then unused), so that a
// sink's kind can be switched to discard alone.
type DiscardSink struct{ name string }

func openDiscard(cfg *config.Sink, log zerolog.Logger) (publish.Opener, error) {
	if _, err := decodeEnvelope(cfg); err != nil {
		return nil, err
	}
	return func(context.Context) (publish.Sink, error) {
		log.Warn().Msg("discard sink: messages are acknowledged and dropped (for benchmarks only)")
		return DiscardSink{cfg.Name}, nil
	}, nil
}

// Name implements publish.Sink.
func (s DiscardSink) Name() string { return s.name }

// Publish implements publish.Sink.
func (s DiscardSink) Publish(ctx context.Context, msgs []*message.Message) error { return ctx.Err() }

// Close implements publish.Sink.
func (s DiscardSink) Close() error { return nil }
