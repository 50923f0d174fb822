package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/backoff"
	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/pgconnect"
	"github.com/walpost/walpost/internal/replication"
)

// defaultInitWait is cdc init's --wait: how long it retries a server it
// cannot connect to. A first `docker compose up` starts Postgres and
// cdc init together, and Postgres needs seconds (initdb) before it
// accepts TCP connections.
const defaultInitWait = 60 * time.Second

// retryUnreachable runs setup, and runs it again while it fails because
// the server cannot be reached (the connection refused or timed out, the
// host not resolved yet, the server starting up or out of connection
// slots), as cdc run retries such a server: with internal/backoff from
// replication.BackoffStart up to postgres.reconnect_backoff, and a warning
// per retry. It gives up once wait has passed (an attempt under way, at
// most the connect timeout long, is let finish); wait 0 makes one attempt.
// A refusal by the server (a wrong password, no such role or database:
// pgconnect.Refused), a bad postgres.url and any failure after connecting
// are returned at once. setup must be safe to run again after a failure
// to connect (admin.SetupWith is: it connects before it does anything).
func retryUnreachable(ctx context.Context, cfg *config.Config, wait time.Duration, log zerolog.Logger, setup func(context.Context) error) error {
	deadline := time.Now().Add(wait)
	retry := backoff.New(replication.BackoffStart, cfg.Postgres.ReconnectBackoff.D())
	for attempt := 1; ; attempt++ {
		err := setup(ctx)
		if err == nil || ctx.Err() != nil || !unreachable(err) {
			if pgconnect.Refused(err) {
				return pgconnect.ExplainRefused(err)
			}
			return err
		}
		left := time.Until(deadline)
		if left <= 0 {
			if wait > 0 {
				return fmt.Errorf("%w (gave up after --wait %s, %d attempts)", err, wait, attempt)
			}
			return err
		}
		d := min(retry.Next(), left)
		log.Warn().Err(err).Int("attempt", attempt).Dur("retry_in_ms", d).Dur("wait_left_ms", left.Round(time.Second)).
			Msg("cannot connect to postgres; retrying (cdc init --wait)")
		if !backoff.Sleep(ctx, d) {
			return err
		}
	}
}

// unreachable reports whether err is a failure to connect that waiting
// may cure: any connection error but the server's refusal of the role,
// password or database (decided by the error's kind, never its text).
func unreachable(err error) bool {
	var ce *pgconn.ConnectError
	return errors.As(err, &ce) && !pgconnect.Refused(err)
}
