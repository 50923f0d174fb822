package relay

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/internal/pgconnect"
	"github.com/walpost/walpost/internal/replication"
)

// Decoding from a standby (docs/operations.md, "Decoding from a standby").
// The cycle's check verifies the topology when a cycle starts; while it
// streams, the stream reconnects by itself, also to a standby that was
// promoted meanwhile (its logical slot survives the promotion, PostgreSQL
// 16+). watchPromotion notices the promotion and ends the run: the state
// tables must then be written on the promoted server, and which server
// is the primary is the operator's to say (remove postgres.primary_url),
// not walpost's to guess.

// promotionPoll is how often watchPromotion asks the standby whether it
// is still in recovery.
const promotionPoll = 2 * time.Second

// watchPromotion polls pg_is_in_recovery() on postgres.url every
// promotionPoll until ctx ends (nil) or the standby is found promoted: it
// then returns the topology check's error (replication.ErrNotStandby,
// saying what to do). A server it cannot reach (a restarting standby) is
// tried again at the next poll.
func (r *Relay) watchPromotion(ctx context.Context) error {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	t := time.NewTicker(promotionPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if conn == nil {
			c, err := pgconnect.Connect(ctx, r.cfg.Postgres.URL)
			if err != nil {
				continue
			}
			conn = c
		}
		var recovering bool
		if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&recovering); err != nil {
			conn.Close(context.Background())
			conn = nil
			continue
		}
		if recovering {
			continue
		}
		conns, err := replication.OpenConns(ctx, r.cfg.Postgres.URL, r.cfg.Postgres.PrimaryURL)
		if err == nil { // in recovery again (a restart between the two looks)
			conns.Close()
			continue
		}
		if isTopology(err) {
			r.log.Error().Err(err).Str("slot", r.cfg.Postgres.Slot).Msg("the standby was promoted; stopping (the slot survives the promotion)")
			return fmt.Errorf("the standby the slot is read on (postgres.url) is no longer a standby: %w", err)
		}
	}
}
