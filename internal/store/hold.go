package store

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/internal/decoder"
	"github.com/walpost/walpost/internal/message"
)

// Held keys (relay.on_invalid or on_refused: hold_key; docs/design.md,
// "Held keys"). A row parked under hold_key records its ordering key in
// hold_key: it is the key's head. Every later message of that key (for
// the same sink; "" is every sink) is parked behind it, with hold_key and
// held_behind set, instead of being published. The key is held while any
// of its rows is not resent; `cdc dead-letter resend` or `drop` of the
// head publishes the rest in order and marks each resent, which releases
// the key. The relay holding a message and the release finishing are
// serialised by an advisory lock per (slot, sink, key): a message is
// either held before the release's last check (and released by it) or
// published after the release.

// A Hold is a key held for one sink ("" every sink) and the position of
// its head, the earliest row of the key not resent.
type Hold struct {
	Sink, Key string
	Head      Position
	// HeadID is the head's message id ("" when unreadable); Messages
	// counts the key's rows not resent, the head included (ListHolds).
	HeadID   string
	Messages int
}

// Holds reports whether m is held by h: m is of h's key (the caller
// checks) and not before the head in stream order. A message before the
// head (met again after a restart) goes on as usual.
func (h Hold) Holds(m *message.Message) bool {
	return !before(m.CommitLSN, m.LSN, m.Seq, h.Head)
}

// before reports whether (commit, lsn, seq) comes before p in stream order.
func before(commit, lsn pglogrepl.LSN, seq uint32, p Position) bool {
	switch {
	case commit != p.CommitLSN:
		return commit < p.CommitLSN
	case lsn != p.LSN:
		return lsn < p.LSN
	}
	return seq < p.Seq
}

// holdLock takes the transaction-scoped advisory lock of (slot, sink, key).
const holdLock = `SELECT pg_advisory_xact_lock(hashtextextended($1 || '/' || $2 || '/' || $3, 0))`

// headOf is the query of a held key's head; $1 slot, $2 sink, $3 key.
const headOf = `SELECT commit_lsn::text, lsn::text, seq FROM %s
	WHERE slot = $1 AND sink = $2 AND hold_key = $3 AND resent_at IS NULL
	ORDER BY commit_lsn, lsn, seq LIMIT 1`

// ListHolds returns the slot's held keys with their heads, in the order
// of the heads. A missing table, or one made before hold_key, holds
// nothing.
func ListHolds(ctx context.Context, conn *pgx.Conn, t Tables) ([]Hold, error) {
	if ok, err := TableExists(ctx, conn, t.DeadLetter); err != nil || !ok {
		return nil, err
	}
	var has bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_attribute
		WHERE attrelid = to_regclass($1) AND attname = 'hold_key' AND NOT attisdropped)`, t.DeadLetter).Scan(&has); err != nil || !has {
		return nil, err
	}
	rows, err := conn.Query(ctx, fmt.Sprintf(`SELECT DISTINCT ON (sink, hold_key) sink, hold_key, commit_lsn::text, lsn::text, seq,
			coalesce(message_id, ''), count(*) OVER (PARTITION BY sink, hold_key)
		FROM %s WHERE slot = $1 AND hold_key IS NOT NULL AND resent_at IS NULL
		ORDER BY sink, hold_key, commit_lsn, lsn, seq`, t.DeadLetter), t.Slot)
	if err != nil {
		return nil, fmt.Errorf("reading the held keys in %s: %w", t.DeadLetterName, err)
	}
	defer rows.Close()
	var out []Hold
	for rows.Next() {
		var h Hold
		var commit, lsn string
		var seq int64
		if err := rows.Scan(&h.Sink, &h.Key, &commit, &lsn, &seq, &h.HeadID, &h.Messages); err != nil {
			return nil, err
		}
		h.Head.CommitLSN, _ = pglogrepl.ParseLSN(commit)
		h.Head.LSN, _ = pglogrepl.ParseLSN(lsn)
		h.Head.Seq = uint32(seq)
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	sortHolds(out)
	return out, nil
}

// sortHolds orders holds by their heads' stream order.
func sortHolds(hs []Hold) {
	slices.SortStableFunc(hs, func(a, b Hold) int {
		switch {
		case before(a.Head.CommitLSN, a.Head.LSN, a.Head.Seq, b.Head):
			return -1
		case before(b.Head.CommitLSN, b.Head.LSN, b.Head.Seq, a.Head):
			return 1
		}
		return 0
	})
}

// ParkHead parks a row that cannot be mapped, for every sink, as the head
// of its key (e.Key; e.KeyKnown must be set): Park, with hold_key.
func (d *DeadLetter) ParkHead(ctx context.Context, e *decoder.Error) error {
	return d.parkRow(ctx, e, "", &e.Key)
}

// ParkRefusedHead parks a message that sink refused for good with cause
// as the head of its key for that sink: ParkRefused, with hold_key.
func (d *DeadLetter) ParkRefusedHead(ctx context.Context, sink string, m *message.Message, cause error) error {
	key := m.OrderingKey()
	return d.parkRefused(ctx, sink, m, cause, &key)
}

// ParkBehind parks m behind its key's head for sink ("" every sink) if
// the key is still held, and reports whether it did; false: the key was released
// (every row of it resent or dropped) and m is to be published as usual.
// It takes the key's advisory lock, so a release that finishes
// concurrently either sees m parked or is seen by it.
func (d *DeadLetter) ParkBehind(ctx context.Context, sink string, m *message.Message) (held bool, err error) {
	if err := d.connect(ctx); err != nil {
		return false, err
	}
	key := m.OrderingKey()
	err = pgx.BeginFunc(ctx, d.conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, holdLock, d.t.Slot, sink, key); err != nil {
			return err
		}
		var commit, lsn string
		var seq int64
		err := tx.QueryRow(ctx, fmt.Sprintf(headOf, d.t.DeadLetter), d.t.Slot, sink, key).Scan(&commit, &lsn, &seq)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // released
		}
		if err != nil {
			return err
		}
		headLSN, _ := pglogrepl.ParseLSN(lsn)
		head := FormatAt(headLSN, uint32(seq))
		held = true
		return d.insert(ctx, tx, parkedRow{lsn: m.LSN.String(), seq: m.Seq, sink: sink, commitLSN: m.CommitLSN.String(), id: &m.ID,
			errText: fmt.Sprintf("held: key %q waits for the row at %s (relay.on_%s: hold_key); cdc dead-letter resend or drop of that row releases the key in order",
				key, head, holdingPolicy(sink)),
			row: MessageLine(m), holdKey: &key, heldBehind: &head})
	})
	if err != nil {
		d.reset()
		return false, fmt.Errorf("dead-letter: holding message %s (at %s) of key %q: %w", m.ID, FormatAt(m.LSN, m.Seq), key, err)
	}
	return held, nil
}

// holdingPolicy names the policy that holds keys for sink: on_invalid for
// every sink (""), on_refused for one.
func holdingPolicy(sink string) string {
	if sink == "" {
		return "invalid"
	}
	return "refused"
}

// KeyRows returns the rows of a held key for sink that are not resent, in
// stream order: the head first.
func KeyRows(ctx context.Context, conn *pgx.Conn, t Tables, sink, key string) ([]Parked, error) {
	return queryParked(ctx, conn, t, fmt.Sprintf(`SELECT %s FROM %s WHERE slot = $1 AND sink = $2 AND hold_key = $3 AND resent_at IS NULL
		ORDER BY commit_lsn, lsn, seq`, parkedColumns, t.DeadLetter), t.Slot, sink, key)
}

// KeyHead returns the head of a held key for sink, its earliest row not
// resent, by a keyed query; ok is false when the key is not held.
func KeyHead(ctx context.Context, conn *pgx.Conn, t Tables, sink, key string) (head Parked, ok bool, err error) {
	rows, err := queryParked(ctx, conn, t, fmt.Sprintf(`SELECT %s FROM %s WHERE slot = $1 AND sink = $2 AND hold_key = $3 AND resent_at IS NULL
		ORDER BY commit_lsn, lsn, seq LIMIT 1`, parkedColumns, t.DeadLetter), t.Slot, sink, key)
	if err != nil || len(rows) == 0 {
		return Parked{}, false, err
	}
	return rows[0], true, nil
}

// Heads returns the head row of every held key, by (sink, key), in one
// query; the table must have hold_key (ListHolds found a key).
func Heads(ctx context.Context, conn *pgx.Conn, t Tables) (map[[2]string]Parked, error) {
	rows, err := queryParked(ctx, conn, t, fmt.Sprintf(`SELECT DISTINCT ON (sink, hold_key) %s FROM %s
		WHERE slot = $1 AND hold_key IS NOT NULL AND resent_at IS NULL ORDER BY sink, hold_key, commit_lsn, lsn, seq`, parkedColumns, t.DeadLetter), t.Slot)
	if err != nil {
		return nil, err
	}
	out := make(map[[2]string]Parked, len(rows))
	for _, p := range rows {
		out[[2]string{p.Sink, p.HoldKey}] = p
	}
	return out, nil
}

// SettleHeld marks p resent (drop: deletes it) under its key's advisory
// lock and reports how many rows of the key are left not resent: 0 means
// the key is released, and the relay publishes its next message as usual.
func SettleHeld(ctx context.Context, conn *pgx.Conn, t Tables, p *Parked, drop bool) (left int, err error) {
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, holdLock, t.Slot, p.Sink, p.HoldKey); err != nil {
			return err
		}
		q := "UPDATE %s SET resent_at = now() WHERE slot = $1 AND lsn = $2::pg_lsn AND seq = $3 AND sink = $4"
		if drop {
			q = "DELETE FROM %s WHERE slot = $1 AND lsn = $2::pg_lsn AND seq = $3 AND sink = $4"
		}
		if _, err := tx.Exec(ctx, fmt.Sprintf(q, t.DeadLetter), t.Slot, p.LSN.String(), int64(p.Seq), p.Sink); err != nil {
			return err
		}
		return tx.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM %s WHERE slot = $1 AND sink = $2 AND hold_key = $3 AND resent_at IS NULL", t.DeadLetter),
			t.Slot, p.Sink, p.HoldKey).Scan(&left)
	})
	if err != nil {
		return 0, fmt.Errorf("settling %s (at %s) of held key %q in %s: %w", p.Name(), p.At(), p.HoldKey, t.DeadLetterName, err)
	}
	return left, nil
}
