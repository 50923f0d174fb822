package replay

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/pgconnect"
	"github.com/walpost/walpost/internal/store"
)

// DeadLetters is `cdc dead-letter`'s connection to the slot's parked
// messages (postgres.dead_letter_table): list, show and drop them here,
// resend them with Resend. Not safe for concurrent use.
type DeadLetters struct {
	conn *pgx.Conn
	t    store.Tables
}

// OpenDeadLetters connects and checks that the dead-letter table has the
// current columns (store.CheckParkedTable: cdc init adds them after an
// upgrade). The caller closes it.
func OpenDeadLetters(ctx context.Context, cfg *config.Config) (*DeadLetters, error) {
	conn, err := pgconnect.Connect(ctx, cfg.Postgres.StateURL())
	if err != nil {
		return nil, err
	}
	t := store.TablesOf(cfg)
	if err := store.CheckParkedTable(ctx, conn, t); err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	return &DeadLetters{conn: conn, t: t}, nil
}

// Close closes the connection.
func (d *DeadLetters) Close() { d.conn.Close(context.Background()) }

// List returns the parked rows f selects (store.ListParked), and the ids
// of f.IDs that name none of them.
func (d *DeadLetters) List(ctx context.Context, f store.ParkedFilter) (parked []store.Parked, missing []string, err error) {
	parked, err = store.ListParked(ctx, d.conn, d.t, f)
	if err != nil {
		return nil, nil, err
	}
	return parked, unmatched(f.IDs, parked), nil
}

// Drop deletes the parked row p (store.DropParked); false when it was
// gone already.
func (d *DeadLetters) Drop(ctx context.Context, p *store.Parked) (bool, error) {
	return store.DropParked(ctx, d.conn, d.t, p)
}

// NotFound is the error for ids that name no parked row (List's missing).
func (d *DeadLetters) NotFound(missing []string) error {
	return fmt.Errorf("no parked message of slot %s in %s is %s (see cdc dead-letter list)", d.t.Slot, d.t.DeadLetterName, strings.Join(missing, ", "))
}

// unmatched returns the ids that name none of parked.
func unmatched(ids []string, parked []store.Parked) []string {
	var out []string
	for _, id := range ids {
		found := false
		for i := range parked {
			lsn, seq, ok := store.ParseAt(strings.ToUpper(id))
			if parked[i].ID == id || ok && parked[i].LSN == lsn && (seq < 0 || int64(parked[i].Seq) == seq) {
				found = true
				break
			}
		}
		if !found {
			out = append(out, id)
		}
	}
	return out
}
