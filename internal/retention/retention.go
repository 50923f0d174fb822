package retention

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/backoff"
	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/layout"
	"github.com/walpost/walpost/internal/pgconnect"
	"github.com/walpost/walpost/internal/sqlident"
	"github.com/walpost/walpost/internal/store"
)

// Settings are what a Job needs of the config.
type Settings struct {
	Slot      string
	Outbox    layout.Table
	Retention config.Retention
}

// SettingsOf returns cfg's retention settings, or nil when retention is
// off.
func SettingsOf(cfg *config.Config) *Settings {
	if cfg.Relay.Retention == nil {
		return nil
	}
	return &Settings{Slot: cfg.Postgres.Slot, Outbox: cfg.Outbox(), Retention: *cfg.Relay.Retention}
}

// ErrCheck is wrapped by Check's errors about the server's objects.
var ErrCheck = errors.New("retention: check failed")

// Job deletes delivered rows of one outbox. See the package documentation.
type Job struct {
	url     string
	s       Settings
	marks   string // the marks table, quoted
	log     zerolog.Logger
	deleted func(n int64)
	// slotURL, when set (SlotOn), is the server that holds the slot (a
	// standby): its confirmed position is read there, the marks on url.
	slotURL string

	deleteStmt string // from Check; $1 = the bound (timestamptz), $2 = the batch
}

// New returns a Job for s on connections to url; deleted is told how many
// rows each batch removed (walpost_retention_deleted_total).
func New(url string, s Settings, deleted func(n int64), log zerolog.Logger) *Job {
	if deleted == nil {
		deleted = func(int64) {}
	}
	return &Job{url: url, s: s, marks: store.QuoteTable(s.Retention.MarksTable), deleted: deleted,
		log: log.With().Str("component", "retention").Logger()}
}

// SlotOn makes the Job read the slot's confirmed position on the server
// at url (a standby the slot is read on: docs/operations.md, "Decoding
// from a standby") instead of its own: the marks, taken on the primary,
// are positions of the same WAL. Call it before Run.
func (j *Job) SlotOn(url string) { j.slotURL = url }

// Setup creates the marks table when missing (`cdc init`).
func Setup(ctx context.Context, conn *pgx.Conn, s Settings) (store.Result, error) {
	return store.SetupMarks(ctx, conn, store.QuoteTable(s.Retention.MarksTable))
}

// ForgetMarks deletes the marks of s.Slot (`cdc init`, when it created
// the slot: marks of an earlier slot of the same name prove nothing for
// it) and returns how many there were.
func ForgetMarks(ctx context.Context, conn *pgx.Conn, s Settings) (int64, error) {
	tag, err := conn.Exec(ctx, "DELETE FROM "+store.QuoteTable(s.Retention.MarksTable)+" WHERE slot = $1", s.Slot)
	if err != nil {
		return 0, fmt.Errorf("deleting the marks of slot %q from %s: %w", s.Slot, s.Retention.MarksTable, err)
	}
	return tag.RowsAffected(), nil
}

// Check verifies, read-only, what the Job needs: the time column exists
// and is a timestamp, the role may delete from the outbox, the marks table
// exists with its grants. It prepares the DELETE statement.
func (j *Job) Check(ctx context.Context, conn *pgx.Conn) error {
	t, col := j.s.Outbox, j.s.Retention.Column
	var typ *string
	var indexed bool
	err := conn.QueryRow(ctx, `SELECT format_type(a.atttypid, NULL),
			EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = a.attrelid AND i.indkey[0] = a.attnum)
		FROM pg_attribute a WHERE a.attrelid = to_regclass($1) AND a.attname = $2 AND NOT a.attisdropped`,
		t.Qualified(), col).Scan(&typ, &indexed)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%w: relay.retention.column: table %s has no column %q; set relay.retention.column to its timestamp column", ErrCheck, t, col)
	case err != nil:
		return fmt.Errorf("relay.retention.column: reading the columns of %s: %w", t, err)
	}
	stmt, err := deleteStatement(t, col, *typ)
	if err != nil {
		return err
	}
	if !indexed {
		j.log.Warn().Str("table", t.String()).Str("column", col).
			Msg(fmt.Sprintf("relay.retention.column has no index: each batch scans the table; consider CREATE INDEX ON %s (%s)",
				sqlident.Readable(t.Schema, t.Name), sqlident.Readable(col)))
	}
	var may bool
	if err := conn.QueryRow(ctx, "SELECT has_table_privilege($1, 'DELETE')", t.Qualified()).Scan(&may); err != nil {
		return fmt.Errorf("relay.retention: checking privileges on %s: %w", t, err)
	}
	if !may {
		var role string
		if err := conn.QueryRow(ctx, "SELECT current_user").Scan(&role); err != nil {
			return err
		}
		return fmt.Errorf("%w: relay.retention: role %s may not delete from %s; run GRANT DELETE ON %s TO %s (see sql/roles.sql)",
			ErrCheck, role, t, sqlident.Readable(t.Schema, t.Name), sqlident.Readable(role))
	}
	if err := store.CheckMarks(ctx, conn, j.marks, j.s.Retention.MarksTable); err != nil {
		return err
	}
	j.deleteStmt = stmt
	return nil
}

// deleteStatement is the DELETE of one batch of rows of t older than the
// bound, for its column col of type typ (as format_type names it): $1 is
// the bound (timestamptz), $2 the batch size. With sent_at mapped, only
// rows whose sent-at column is set are deleted.
func deleteStatement(t layout.Table, col, typ string) (string, error) {
	bound := "$1::timestamptz"
	switch typ {
	case "timestamp with time zone":
	case "timestamp without time zone":
		bound = "($1::timestamptz AT TIME ZONE 'UTC')" // as columns.time and sent_at read it
	default:
		return "", fmt.Errorf("%w: relay.retention.column: column %q of %s has type %s; it must be timestamptz or timestamp", ErrCheck, col, t, typ)
	}
	where := pgx.Identifier{col}.Sanitize() + " < " + bound
	if t.Columns.Has(layout.SentAt) {
		where += " AND " + t.Columns.Column(layout.SentAt) + " IS NOT NULL"
	}
	return fmt.Sprintf("DELETE FROM %[1]s WHERE ctid = ANY(ARRAY(SELECT ctid FROM %[1]s WHERE %[2]s LIMIT $2))", t.Qualified(), where), nil
}

// Run takes a mark and deletes what the newest confirmed mark proves
// delivered every interval, until ctx ends. It returns nil: a failing
// round is logged and tried again (delivery does not depend on it).
func (j *Job) Run(ctx context.Context) error {
	if j.deleteStmt == "" {
		return errors.New("retention: Run before Check")
	}
	var conn, slotConn *pgx.Conn
	defer func() {
		for _, c := range []*pgx.Conn{conn, slotConn} {
			if c != nil {
				c.Close(context.Background())
			}
		}
	}()
	r := j.s.Retention
	retry := backoff.New(r.Interval.D(), 10*r.Interval.D())
	wait := r.Interval.D()
	for {
		if !backoff.Sleep(ctx, wait) {
			return nil
		}
		err := j.round(ctx, &conn, &slotConn)
		switch {
		case err == nil:
			retry.Reset()
			wait = r.Interval.D()
		case ctx.Err() != nil:
			return nil
		default:
			for _, c := range []**pgx.Conn{&conn, &slotConn} {
				if *c != nil {
					(*c).Close(context.Background())
					*c = nil
				}
			}
			wait = retry.Next()
			j.log.Error().Err(err).Dur("retry_in_ms", wait).
				Msg("retention: deleting delivered rows failed; the outbox keeps them until it works (delivery is not affected)")
		}
	}
}

// proof is the newest mark the slot's confirmed position passed, and the
// bound it gives: rows older than before were delivered.
type proof struct {
	lsn    string
	taken  time.Time
	before time.Time
}

// deleteBefore is the bound a mark taken at taken gives at now: a row
// whose time is before it is older than keep and committed before the
// mark, hence was acknowledged by every sink once the slot confirmed the
// mark, unless its transaction ran longer than margin. It is the earlier
// of now − keep and taken − margin.
func deleteBefore(now, taken time.Time, keep, margin time.Duration) time.Time {
	bound := now.Add(-keep)
	if proven := taken.Add(-margin); proven.Before(bound) {
		bound = proven
	}
	return bound
}

// round takes a mark, finds the proof, prunes older marks and deletes
// what the proof covers, in batches.
func (j *Job) round(ctx context.Context, conn, slotConn **pgx.Conn) error {
	if *conn == nil {
		c, err := pgconnect.Connect(ctx, j.url)
		if err != nil {
			return err
		}
		*conn = c
	}
	c, r := *conn, j.s.Retention
	if _, err := c.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (slot, lsn, taken_at)
		VALUES ($1, pg_current_wal_insert_lsn(), now()) ON CONFLICT DO NOTHING`, j.marks), j.s.Slot); err != nil {
		return fmt.Errorf("taking a mark in %s: %w", r.MarksTable, err)
	}
	var p proof
	var now time.Time // the server's: the time the rows' times and the marks were taken on
	q := fmt.Sprintf(`SELECT m.lsn::text, m.taken_at, now()
		FROM %s m JOIN pg_replication_slots s ON s.slot_name = m.slot
		WHERE m.slot = $1 AND m.lsn <= s.confirmed_flush_lsn
		ORDER BY m.lsn DESC LIMIT 1`, j.marks)
	args := []any{j.s.Slot}
	if j.slotURL != "" {
		confirmed, err := j.confirmedOnSlotServer(ctx, slotConn)
		if err != nil || confirmed == nil {
			return err // nil, nil: the slot is not there (yet); nothing proven
		}
		q = fmt.Sprintf(`SELECT m.lsn::text, m.taken_at, now() FROM %s m
			WHERE m.slot = $1 AND m.lsn <= $2::pg_lsn ORDER BY m.lsn DESC LIMIT 1`, j.marks)
		args = append(args, *confirmed)
	}
	err := c.QueryRow(ctx, q, args...).Scan(&p.lsn, &p.taken, &now)
	if errors.Is(err, pgx.ErrNoRows) {
		j.log.Debug().Str("slot", j.s.Slot).Msg("retention: the slot has not confirmed a mark yet; nothing is proven delivered")
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the marks the slot confirmed: %w", err)
	}
	p.before = deleteBefore(now, p.taken, r.Keep.D(), r.Margin.D())
	if _, err := c.Exec(ctx, fmt.Sprintf("DELETE FROM %s WHERE slot = $1 AND lsn < $2::pg_lsn", j.marks), j.s.Slot, p.lsn); err != nil {
		return fmt.Errorf("pruning old marks in %s: %w", r.MarksTable, err)
	}
	return j.deleteBatches(ctx, c, p)
}

// confirmedOnSlotServer reads the slot's confirmed_flush_lsn on the
// server at slotURL (SlotOn); nil when the slot is missing or has none.
func (j *Job) confirmedOnSlotServer(ctx context.Context, slotConn **pgx.Conn) (*string, error) {
	if *slotConn == nil {
		c, err := pgconnect.Connect(ctx, j.slotURL)
		if err != nil {
			return nil, err
		}
		*slotConn = c
	}
	var confirmed *string
	err := (*slotConn).QueryRow(ctx, "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", j.s.Slot).Scan(&confirmed)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the slot's confirmed position on its standby: %w", err)
	}
	return confirmed, nil
}

// deleteBatches deletes rows older than p.before, r.Batch at a time, with
// r.Pause between batches, until a batch finds fewer rows or ctx ends.
func (j *Job) deleteBatches(ctx context.Context, c *pgx.Conn, p proof) error {
	r := j.s.Retention
	var total int64
	defer func() {
		if total > 0 {
			j.log.Info().Int64("rows", total).Time("older_than", p.before).Str("mark_lsn", p.lsn).Time("mark_taken_at", p.taken).
				Msg("retention: deleted delivered rows")
		}
	}()
	for {
		tag, err := c.Exec(ctx, j.deleteStmt, p.before, r.Batch)
		if err != nil {
			return fmt.Errorf("deleting from %s: %w", j.s.Outbox, err)
		}
		n := tag.RowsAffected()
		total += n
		j.deleted(n)
		if n < int64(r.Batch) {
			return nil
		}
		if !backoff.Sleep(ctx, r.Pause.D()) {
			return nil
		}
	}
}
