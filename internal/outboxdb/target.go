package outboxdb

import (
	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/replication"
)

// Target derives the replication target from the config: the outbox
// table, the publication, the slot, and whether the outbox is table-less.
func Target(cfg *config.Config) replication.Target {
	return replication.Target{Outbox: cfg.Outbox(), Publication: cfg.Postgres.Publication, Slot: cfg.Postgres.Slot,
		TableLess: cfg.Postgres.TableLess()}
}
