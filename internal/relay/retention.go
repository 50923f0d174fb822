package relay

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/internal/retention"
)

// checkRetention prepares relay.retention's job, when it is on, checking
// what it needs of the server (docs/design.md, "Retention"). The job runs
// beside the pipeline while the relay holds the slot (streamCycle).
func (r *Relay) checkRetention(ctx context.Context, conn *pgx.Conn, stateURL string) (*retention.Job, error) {
	s := retention.SettingsOf(r.cfg)
	if s == nil {
		return nil, nil
	}
	job := retention.New(stateURL, *s, func(n int64) { r.metrics.retentionDeleted.Add(float64(n)) }, r.log)
	if stateURL != r.cfg.Postgres.URL {
		job.SlotOn(r.cfg.Postgres.URL) // the marks on the primary, the slot on the standby
	}
	if err := job.Check(ctx, conn); err != nil {
		return nil, err
	}
	return job, nil
}
