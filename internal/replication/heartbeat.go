package replication

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/decoder"
	"github.com/walpost/walpost/internal/pgconnect"
)

// RunHeartbeat keeps the slot moving while the outbox is idle and other
// tables are busy. Postgres sends keepalives (whose WAL end the relay
// confirms when nothing is in flight) mostly when the WAL sender is idle;
// a sender busy decoding unrelated transactions may send nothing for a
// long time, and the slot then holds WAL back. Every interval in which the
// stream received nothing, RunHeartbeat writes a tiny non-transactional
// logical message on an ordinary connection; it arrives in the stream as a
// point outside any transaction, which the relay can confirm.
//
// It returns when ctx ends; connection errors are logged and retried at the
// next tick.
func RunHeartbeat(ctx context.Context, url string, interval time.Duration, s *Stream, log zerolog.Logger) error {
	if interval <= 0 {
		return nil
	}
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if !s.Connected() || time.Since(s.LastReceived()) < interval {
			continue
		}
		if conn == nil {
			c, err := pgconnect.Connect(ctx, url)
			if err != nil {
				log.Warn().Err(err).Msg("heartbeat: cannot connect")
				continue
			}
			conn = c
		}
		if _, err := conn.Exec(ctx, "SELECT pg_logical_emit_message(false, $1, '')", decoder.HeartbeatPrefix); err != nil {
			if ctx.Err() == nil {
				log.Warn().Err(err).Msg("heartbeat: pg_logical_emit_message failed")
			}
			conn.Close(context.Background())
			conn = nil
			continue
		}
		log.Debug().Msg("heartbeat written")
	}
}
