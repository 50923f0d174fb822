package tracing

import (
	"context"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/config"
)

// shutdownTimeout bounds the export of the last spans when a command
// ends: an exporter that is down does not hold up the exit.
const shutdownTimeout = 5 * time.Second

// Start turns tracing on as c (the tracing: block, nil for none) and the
// OTEL_* variables say (Resolve, New): it returns the provider (nil when
// tracing is off), ctx carrying it (WithProvider) and stop, which exports
// what is left within a few seconds. stop is never nil. An error is a
// configuration error (a bad OTEL_* value).
func Start(ctx context.Context, c *config.Tracing, version string, reg prometheus.Registerer,
	log zerolog.Logger) (*Provider, context.Context, func(), error) {
	s, err := Resolve(c, os.Getenv)
	if err != nil {
		return nil, ctx, func() {}, err
	}
	p, err := New(ctx, s, version, reg, log)
	if err != nil || p == nil {
		return nil, ctx, func() {}, err
	}
	return p, WithProvider(ctx, p), func() { p.Shutdown(shutdownTimeout) }, nil
}
