package admin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/backoff"
	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/decoder"
	"github.com/walpost/walpost/internal/outboxdb"
	"github.com/walpost/walpost/internal/pgconnect"
	"github.com/walpost/walpost/internal/replication"
	"github.com/walpost/walpost/internal/store"
)

// Errors of Skip.
var (
	ErrSkipNotFound = errors.New("admin: no message to skip")
	ErrSkipOther    = errors.New("admin: the relay does not stop at that LSN")
)

// Skipped is the message Skip parked.
type Skipped struct {
	ID             string
	LSN, CommitLSN pglogrepl.LSN
	Seq            uint32
	Err            error
}

// skipPeeks are the upto_nchanges limits Skip peeks with, in turn: the
// row a relay stops at is in the first transaction after the slot's
// confirmed position, so the first, small peek finds it unless transactions
// without a bad row come first.
var skipPeeks = []any{1, 10_000, 1_000_000, nil}

// skipHead is how much of a change over postgres.max_message_bytes cdc
// skip reads: its first columns (a stand-in keeps at most 64 KiB).
const skipHead = 1 << 20

// Skip parks in the dead-letter table the one message that a relay with
// relay.on_invalid: stop stops at, so that the next run goes past it (`cdc
// skip`). It reads the slot's pending changes without consuming them
// (pg_logical_slot_peek_binary_changes, so no relay may hold the slot),
// decodes them as the relay does, and finds the first row that cannot be
// mapped. It parks that row only if it is at lsn (and, when seq is not
// negative, is row seq of the rows at lsn: a multi-row insert); any other
// position is refused with the one the relay stops at, and so is a row
// that fails because the table does not fit the mapping (every row would:
// fix the config).
func Skip(ctx context.Context, cfg *config.Config, lsn pglogrepl.LSN, seq int64) (Skipped, error) {
	conn, err := pgconnect.Connect(ctx, cfg.Postgres.URL)
	if err != nil {
		return Skipped{}, err
	}
	defer conn.Close(context.Background())
	info, err := checkSlotReleased(ctx, conn, cfg.Postgres.Slot)
	if err != nil {
		return Skipped{}, err
	}
	if info.Active {
		return Skipped{}, slotInUse("skip", cfg.Postgres.Slot, info.ActivePID)
	}
	dead := store.NewDeadLetter(cfg.Postgres.StateURL(), store.TablesOf(cfg)) // the primary when the slot is on a standby
	defer dead.Close()
	de, err := firstInvalid(ctx, conn, cfg, dead)
	if err != nil {
		return Skipped{}, err
	}
	if err := checkSkip(de, info.ConfirmedFlush, lsn, seq); err != nil {
		return Skipped{}, err
	}
	if err := dead.Park(ctx, de, store.SkippedPrefix+de.Err.Error()); err != nil {
		return Skipped{}, err
	}
	return Skipped{ID: de.ID, LSN: de.LSN, CommitLSN: de.CommitLSN, Seq: de.Seq, Err: de.Err}, nil
}

// checkSkip says whether cdc skip --lsn lsn (seq: -1 when not given)
// may park de, the first message after the slot's confirmed position
// that the relay cannot map (nil: none): only the message the relay stops
// at, and never a row of a table that does not fit the mapping.
func checkSkip(de *decoder.Error, confirmed, lsn pglogrepl.LSN, seq int64) error {
	if de == nil {
		return fmt.Errorf("%w: every message after the slot's confirmed position %s maps; nothing to skip", ErrSkipNotFound, confirmed)
	}
	if de.Table {
		return fmt.Errorf("%w: %v: the table does not fit the mapping, so every row would fail alike; fix columns: or the table instead (skipping one row cannot help)", ErrSkipOther, de)
	}
	if de.LSN != lsn || seq >= 0 && int64(de.Seq) != seq {
		want := lsn.String()
		if seq >= 0 {
			want = store.FormatAt(lsn, uint32(seq))
		}
		return fmt.Errorf("%w: the first message the relay cannot map is at --lsn %s (%v), not %s; cdc skip parks only the message the relay stops at",
			ErrSkipOther, store.FormatAt(de.LSN, de.Seq), de, want)
	}
	return nil
}

// firstInvalid returns the first row after the slot's confirmed position
// that the decoder cannot map and that is not parked already (the relay
// goes past those, as after an earlier cdc skip in the same transaction),
// or nil.
func firstInvalid(ctx context.Context, conn *pgx.Conn, cfg *config.Config, dead *store.DeadLetter) (*decoder.Error, error) {
	// Logical messages (adopted rows, a table-less outbox) as the stream
	// asks for them: from PostgreSQL 14 on, where pgoutput knows the option.
	messages := ""
	if ok, _, err := replication.SendsMessages(ctx, conn); err != nil {
		return nil, err
	} else if ok {
		messages = ", 'messages', 'true'"
	}
	adopted, err := outboxdb.AdoptedXids(ctx, conn, cfg, zerolog.Nop())
	if err != nil {
		return nil, err
	}
	for _, limit := range skipPeeks {
		dec := outboxdb.NewDecoder(cfg)
		if adopted != nil {
			dec.AdoptFrom(adopted)
		}
		n := 0
		// A change over postgres.max_message_bytes comes as its head
		// only, and is decoded as the stream's stand-in of it
		// (decoder.CutHead): the relay never holds it whole, nor does
		// cdc skip.
		rows, err := conn.Query(ctx, `SELECT lsn::text, octet_length(data),
			CASE WHEN octet_length(data) > $4 THEN substring(data FROM 1 FOR $5) ELSE data END
			FROM pg_logical_slot_peek_binary_changes($1, NULL, $2::int,
			'proto_version', '1', 'publication_names', $3`+messages+`)`, cfg.Postgres.Slot, limit, quotePublication(cfg.Postgres.Publication),
			cfg.Postgres.MaxMessageBytes, skipHead)
		if err != nil {
			return nil, fmt.Errorf("reading the slot's pending changes: %w", err)
		}
		var found *decoder.Error
		for rows.Next() && found == nil {
			n++
			var lsnText string
			var size int64
			var data []byte
			if err := rows.Scan(&lsnText, &size, &data); err != nil {
				rows.Close()
				return nil, err
			}
			if size > int64(cfg.Postgres.MaxMessageBytes) {
				data = decoder.CutHead(data, size)
			}
			at, _ := pglogrepl.ParseLSN(lsnText)
			_, err := dec.Decode(at, data)
			if err != nil && !errors.As(err, &found) {
				rows.Close()
				return nil, fmt.Errorf("decoding the slot's pending changes at %s: %w", at, err)
			}
			if found != nil && found.Forged && !cfg.Postgres.TableLess() {
				found = nil // a forged adopt message: the relay ignores it
			}
			if found != nil && !found.Table {
				parked, err := dead.Parked(ctx, found.LSN, found.Seq) // on the dead-letter store's own connection
				if err != nil {
					rows.Close()
					return nil, err
				}
				if parked {
					found = nil
				}
			}
		}
		rows.Close()
		if found != nil {
			return found, nil
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("reading the slot's pending changes: %w", err)
		}
		if limit != nil && n < limit.(int) {
			return nil, nil // everything pending was read
		}
	}
	return nil, nil
}

// quotePublication quotes a publication name for pgoutput's
// publication_names option, a list of identifiers.
func quotePublication(name string) string { return pgx.Identifier{name}.Sanitize() }

// releaseGrace is how long a command that needs the slot free waits for a
// holder to let go: the WAL sender of a relay that just exited (stopped at
// a bad row, say) ends a moment after it, and the slot shows active until
// then.
const releaseGrace = 3 * time.Second

// checkSlotReleased is replication.CheckSlot, read again every 100 ms for
// up to releaseGrace while the slot is active.
func checkSlotReleased(ctx context.Context, conn *pgx.Conn, slot string) (replication.SlotInfo, error) {
	deadline := time.Now().Add(releaseGrace)
	for {
		info, err := replication.CheckSlot(ctx, conn, slot)
		if err != nil || !info.Active || time.Now().After(deadline) {
			return info, err
		}
		if !backoff.Sleep(ctx, 100*time.Millisecond) {
			return info, ctx.Err()
		}
	}
}
