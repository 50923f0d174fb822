package main

import (
	"context"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/relay"
	"github.com/walpost/walpost/internal/tracing"
)

// traced are the commands that publish, and so record publish spans when
// tracing is on (tracing:; docs/operations.md, "Tracing").
var traced = map[string]bool{"run": true, "replay": true, "dead-letter": true}

// tracingShutdown bounds the export of the last spans when a command
// ends: an exporter that is down does not hold up the exit.
const tracingShutdown = 5 * time.Second

// startTracing turns tracing on for cmd as cfg and the OTEL_* variables
// say: the relay's runners and the resends record spans, and ctx carries
// the provider. stop exports what is left. An error is a configuration
// error (a bad OTEL_* value).
func startTracing(ctx context.Context, cmd *command, cfg *config.Config, r *relay.Relay, reg prometheus.Registerer,
	log zerolog.Logger) (context.Context, func(), error) {
	if !traced[cmd.name] {
		return ctx, func() {}, nil
	}
	s, err := tracing.Resolve(cfg.Tracing, os.Getenv)
	if err != nil {
		return ctx, func() {}, err
	}
	p, err := tracing.New(ctx, s, readBuild().version, reg, log)
	if err != nil || p == nil {
		return ctx, func() {}, err
	}
	r.Tracing = p
	return tracing.WithProvider(ctx, p), func() { p.Shutdown(tracingShutdown) }, nil
}
