package relay

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/internal/pgconnect"
)

// Decoding from a standby (docs/operations.md, "Decoding from a standby").
// The cycle's check verifies the topology when a cycle starts; while it
// streams, the stream reconnects by itself, also to a standby that was
// promoted meanwhile (its logical slot survives the promotion, PostgreSQL
// 16+), while the cycle would go on writing its state to the old primary.
// watchPromotion notices the promotion and starts a new cycle, whose check
// finds the standby promoted (replication.Topology.Promoted): it streams
// on from the same slot and writes its state on the promoted server.

// promotionPoll is how often watchPromotion asks the standby whether it
// is still in recovery.
const promotionPoll = 2 * time.Second

// watchPromotion polls pg_is_in_recovery() on postgres.url every
// promotionPoll until ctx ends (nil) or the standby is found promoted: it
// then returns a restart (a new cycle). A server it cannot reach (a
// restarting standby) is tried again at the next poll.
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
		if !recovering {
			r.log.Warn().Str("slot", r.cfg.Postgres.Slot).Msg("the standby the slot is read on (postgres.url) was promoted; starting a new cycle, which reads the slot and writes the state on it")
			return restart{errors.New("relay: the standby of postgres.url was promoted")}
		}
	}
}
