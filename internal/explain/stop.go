package explain

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/internal/pgconnect"
	"github.com/walpost/walpost/internal/pipeline"
	"github.com/walpost/walpost/internal/replication"
	"github.com/walpost/walpost/internal/store"
)

// Stop tells the operator where the slot stands (read from the
// server: the slot's own confirmed position) and the ways past the row.
func (r Run) Stop(stop *pipeline.StopAtRow, tracked pglogrepl.LSN) error {
	cfg := r.Config
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	slotAt := tracked.String() + " (as last sent to the server)"
	if conn, err := pgconnect.Connect(ctx, cfg.Postgres.URL); err == nil {
		if info, err := replication.ReadSlot(ctx, conn, cfg.Postgres.Slot); err == nil && info.Exists {
			slotAt = info.ConfirmedFlush.String()
		}
		conn.Close(context.Background())
	}
	de := stop.Err
	if de.Table {
		return fmt.Errorf("%w; the slot %s is confirmed up to %s, before this message's transaction. "+
			"The stream carries each row with the table's columns as they were when it was written: if columns: in the config is wrong, fix it and restart. "+
			"If the table changed since (a column renamed, dropped or retyped), changing it now does not change the rows written before: "+
			"stop every relay on the slot, make the table and columns: match, and run: cdc resync --config %s "+
			"(it relays the rows committed since the slot's confirmed position from the table and moves the slot past them); then start cdc run again",
			de, cfg.Postgres.Slot, slotAt, r.ConfigPath)
	}
	if stop.Fill {
		why := "relay.on_invalid is stop"
		if stop.NoKey {
			why = "relay.on_invalid is hold_key, but this row's ordering key (its key column, or its id when the key is NULL) cannot be read, so which messages to hold behind it is unknown"
		}
		return fmt.Errorf("%w; this row was read from the outbox table %s to relay what the stream may not have carried while the publication or the table changed "+
			"(docs/operations.md, \"The publication or the table changed under the relay\"), and %s: the relay stopped here, and a restart stops here again (slot %s is confirmed up to %s). "+
			"cdc skip cannot park it (it is not in the stream): fix the row in the table so that it maps (UPDATE its columns), or delete it, then start cdc run again; "+
			"or set relay.on_invalid: dead_letter to park it in %s and go on",
			de, r.Target.Outbox, why, cfg.Postgres.Slot, slotAt, cfg.Postgres.DeadLetterTable)
	}
	if stop.NoKey {
		return fmt.Errorf("%w; relay.on_invalid is hold_key, but this row's ordering key (its key column, or its id when the key is NULL) cannot be read, "+
			"so which messages to hold behind it is unknown: the relay stopped here (everything before it was delivered, nothing after; slot %s is confirmed up to %s). "+
			"The stream carries the row as written, so to go past it stop every relay on the slot and run: cdc skip --config %s --lsn %s "+
			"(it parks the row in %s and the next run goes on after it, holding nothing)",
			de, cfg.Postgres.Slot, slotAt, r.ConfigPath, store.FormatAt(de.LSN, de.Seq), cfg.Postgres.DeadLetterTable)
	}
	return fmt.Errorf("%w; relay.on_invalid is stop: everything before this message was delivered, nothing after it, and slot %s is confirmed up to %s. "+
		"A restart stops here again. To go past this one message, stop every relay on the slot and run: cdc skip --config %s --lsn %s "+
		"(it parks the message in %s and the next run goes on after it); or set relay.on_invalid: dead_letter to park such rows and go on",
		de, cfg.Postgres.Slot, slotAt, r.ConfigPath, store.FormatAt(de.LSN, de.Seq), cfg.Postgres.DeadLetterTable)
}
