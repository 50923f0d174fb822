package outboxdb

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/decoder"
	"github.com/walpost/walpost/internal/store"
)

// NewDecoder returns the decoder of cfg's outbox, which also reads the
// rows `cdc init --adopt` emitted for its slot; for a table-less outbox,
// the decoder of its envelopes.
func NewDecoder(cfg *config.Config) *decoder.Decoder {
	d := decoder.New(cfg.Outbox())
	if cfg.Postgres.TableLess() {
		d.AcceptMessages(cfg.Postgres.MessagePrefix)
		if len(cfg.Postgres.MessageKeys) > 0 {
			keys := make([][]byte, len(cfg.Postgres.MessageKeys))
			for i, k := range cfg.Postgres.MessageKeys {
				keys[i] = []byte(k)
			}
			d.RequireSignature(keys)
		}
		return d
	}
	d.AcceptAdopted(decoder.AdoptPrefix(cfg.Postgres.Slot))
	return d
}

// OwnPrefixes are the prefixes of the logical messages NewDecoder's
// decoder reads (the heartbeat's too): the stream reads past a large one
// of any other prefix without holding it (replication.StreamOptions).
func OwnPrefixes(cfg *config.Config) []string {
	if cfg.Postgres.TableLess() {
		return []string{decoder.HeartbeatPrefix, cfg.Postgres.MessagePrefix}
	}
	return []string{decoder.HeartbeatPrefix, decoder.AdoptPrefix(cfg.Postgres.Slot)}
}

// AdoptedXids returns the transactions whose adopt messages are rows
// (store.LoadAdopted; an empty slice for none), or nil, which takes them
// from any transaction, when the adopt table does not exist: an outbox
// set up by a walpost before it, whose pending adopt messages must not be
// dropped. That is logged, with the way to close it (cdc init).
func AdoptedXids(ctx context.Context, conn *pgx.Conn, cfg *config.Config, log zerolog.Logger) ([]uint32, error) {
	if cfg.Postgres.TableLess() {
		return nil, nil
	}
	xids, err := store.LoadAdopted(ctx, conn, store.TablesOf(cfg))
	switch {
	case errors.Is(err, store.ErrNoAdoptTable):
		log.Warn().Str("table", cfg.Postgres.AdoptTable).Msg("postgres.adopt_table does not exist: adopt messages are taken from any transaction, " +
			"and any role could forge an outbox row with one; run cdc init (as the table's owner) to create it, once the rows of an earlier cdc init --adopt are delivered")
		return nil, nil
	case err != nil:
		return nil, err
	case xids == nil:
		xids = []uint32{}
	}
	return xids, nil
}
