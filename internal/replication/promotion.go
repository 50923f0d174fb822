package replication

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/internal/pgconnect"
)

// While a cycle streams from a standby (standby.go), the stream reconnects
// by itself, also to a standby that was promoted meanwhile (its logical
// slot survives the promotion, PostgreSQL 16+), while the relay would go on
// writing its state to the old primary. WatchPromotion notices the
// promotion, so that the relay starts a new cycle, whose check finds the
// standby promoted (Topology.Promoted): it streams on from the same slot
// and writes its state on the promoted server.

// PromotionPoll is how often WatchPromotion asks the standby whether it is
// still in recovery.
const PromotionPoll = 2 * time.Second

// WatchPromotion polls pg_is_in_recovery() on the standby at url every
// PromotionPoll until ctx ends (false) or the standby is found promoted
// (true). A server it cannot reach (a restarting standby) is tried again
// at the next poll.
func WatchPromotion(ctx context.Context, url string) bool {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	t := time.NewTicker(PromotionPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
		if conn == nil {
			c, err := pgconnect.Connect(ctx, url)
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
			return true
		}
	}
}
