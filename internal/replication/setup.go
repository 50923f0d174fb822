package replication

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walpost/walpost/internal/layout"
)

// Target names the outbox, its columns and the replication objects.
type Target struct {
	Outbox      layout.Table
	Publication string
	Slot        string
	// TableLess: postgres.source is messages; there is no outbox table
	// (Outbox is unused) and the publication is empty (messages.go).
	TableLess bool
}

// QualifiedTable returns the quoted schema.table.
func (t Target) QualifiedTable() string { return t.Outbox.Qualified() }

// name is the outbox table's schema.table, for messages.
func (t Target) name() string { return t.Outbox.String() }

// Sentinel errors for the checks; errors returned wrap them with what to do.
var (
	ErrWALLevel     = errors.New("replication: wal_level is not logical")
	ErrNoTable      = errors.New("replication: outbox table missing")
	ErrNoColumn     = errors.New("replication: mapped column missing")
	ErrColumnType   = errors.New("replication: mapped column of an unusable type")
	ErrPrivileges   = errors.New("replication: insufficient privileges")
	ErrSlotPlugin   = errors.New("replication: slot uses another plugin")
	ErrSlotDatabase = errors.New("replication: slot belongs to another database")
	// ErrPublicationMissing: the publication does not exist (cdc init
	// creates it).
	ErrPublicationMissing = errors.New("replication: publication missing")
	// ErrPublicationUncovered: the publication exists but does not publish
	// the outbox table's inserts (cdc init does not change it).
	ErrPublicationUncovered = errors.New("replication: publication does not cover the outbox")
)

// CheckServer checks, on an ordinary connection, what the relay needs from
// the server: wal_level=logical, a role allowed to replicate, the outbox
// table and its mapped columns. Each failure says what to do.
func CheckServer(ctx context.Context, conn *pgx.Conn, t Target) error {
	role, err := CheckReplication(ctx, conn)
	if err != nil {
		return err
	}
	if t.TableLess {
		return checkMessagesServer(ctx, conn)
	}
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", t.QualifiedTable()).Scan(&exists); err != nil {
		return fmt.Errorf("looking up table %s: %w", t.name(), err)
	}
	if !exists {
		if v, err := CaseVariants(ctx, conn, t); err != nil {
			return err
		} else if len(v) > 0 {
			return fmt.Errorf("%w: %s", ErrNoTable, CaseHint(t, v))
		}
		return fmt.Errorf("%w: table %s does not exist; create it with 'cdc init' (DDL in sql/outbox.sql) or point postgres.table at your outbox", ErrNoTable, t.name())
	}
	rows, err := conn.Query(ctx, `SELECT attname FROM pg_attribute WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped`, t.QualifiedTable())
	if err != nil {
		return fmt.Errorf("reading columns of %s: %w", t.name(), err)
	}
	have, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("reading columns of %s: %w", t.name(), err)
	}
	set := map[string]bool{}
	for _, c := range have {
		set[c] = true
	}
	for role, col := range t.Outbox.Columns {
		if col != "" && !set[col] {
			field := layout.Role(role).Field()
			if hint := ColumnCaseHint(field, col, have); hint != "" {
				return fmt.Errorf("%w: %s: table %s has no column %q, %s", ErrNoColumn, field, t.name(), col, hint)
			}
			return fmt.Errorf("%w: %s: table %s has no column %q (it has %s); fix the mapping under columns: (use \"-\" for key or headers if the table has none)",
				ErrNoColumn, field, t.name(), col, strings.Join(have, ", "))
		}
	}
	if err := checkOrder(ctx, conn, t, set, have); err != nil {
		return err
	}
	var canSelect bool
	if err := conn.QueryRow(ctx, "SELECT has_table_privilege($1, 'SELECT')", t.QualifiedTable()).Scan(&canSelect); err != nil {
		return fmt.Errorf("checking privileges on %s: %w", t.name(), err)
	}
	if !canSelect {
		return fmt.Errorf("%w: role %q cannot SELECT from %s; GRANT SELECT ON %s TO %s", ErrPrivileges, role, t.name(),
			t.QualifiedTable(), pgx.Identifier{role}.Sanitize())
	}
	return nil
}

// CheckReplication checks, on an ordinary connection, what logical
// replication needs of the server and the role: wal_level=logical and
// the REPLICATION attribute (or a superuser). It returns the role's name.
// cdc init runs it before it creates anything.
func CheckReplication(ctx context.Context, conn *pgx.Conn) (role string, err error) {
	var level string
	if err := conn.QueryRow(ctx, "SHOW wal_level").Scan(&level); err != nil {
		return "", fmt.Errorf("reading wal_level: %w", err)
	}
	if level != "logical" {
		return "", fmt.Errorf("%w: wal_level is %s; set wal_level = logical in postgresql.conf (or ALTER SYSTEM SET wal_level = logical) and restart PostgreSQL", ErrWALLevel, level)
	}
	var super, repl bool
	if err := conn.QueryRow(ctx, "SELECT rolname, rolsuper, rolreplication FROM pg_roles WHERE rolname = current_user").Scan(&role, &super, &repl); err != nil {
		return "", fmt.Errorf("reading role attributes: %w", err)
	}
	if !super && !repl {
		return "", fmt.Errorf("%w: role %q lacks the REPLICATION attribute; run ALTER ROLE %s REPLICATION as a superuser (and allow it a replication connection in pg_hba.conf)",
			ErrPrivileges, role, pgx.Identifier{role}.Sanitize())
	}
	return role, nil
}

// checkOrder checks columns.order, when set: a column of the table, of
// one of layout.OrderTypes, NOT NULL (docs/design.md, "Row order from the
// table"). set and have are the table's columns.
func checkOrder(ctx context.Context, conn *pgx.Conn, t Target, set map[string]bool, have []string) error {
	o := t.Outbox.Order
	if o == "" || t.Outbox.OrderIfPresent {
		return nil
	}
	if !set[o] {
		if hint := ColumnCaseHint("columns.order", o, have); hint != "" {
			return fmt.Errorf("%w: columns.order: table %s has no column %q, %s", ErrNoColumn, t.name(), o, hint)
		}
		return fmt.Errorf("%w: columns.order: table %s has no column %q (it has %s); name the column that numbers the rows as they are inserted, or leave columns.order out",
			ErrNoColumn, t.name(), o, strings.Join(have, ", "))
	}
	var typ string
	var notNull bool
	if err := conn.QueryRow(ctx, "SELECT format_type(atttypid, NULL), attnotnull FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = $2 AND NOT attisdropped",
		t.QualifiedTable(), o).Scan(&typ, &notNull); err != nil {
		return fmt.Errorf("reading the type of columns.order %q: %w", o, err)
	}
	switch {
	case !slices.Contains(layout.OrderTypes, typ):
		return fmt.Errorf("%w: columns.order: column %q of %s has type %s; it must be one of %s (an identity or bigserial column numbers the rows as they are inserted)",
			ErrColumnType, o, t.name(), typ, strings.Join(layout.OrderTypes, ", "))
	case !notNull:
		return fmt.Errorf("%w: columns.order: column %q of %s may be NULL; a row without a value has no place in the order: declare it NOT NULL (identity and bigserial columns are)",
			ErrColumnType, o, t.name())
	}
	return nil
}

// CheckPublication checks that the publication exists and publishes the
// table's inserts. It creates nothing (`cdc run`).
func CheckPublication(ctx context.Context, conn *pgx.Conn, t Target) error {
	var pubinsert bool
	err := conn.QueryRow(ctx, "SELECT pubinsert FROM pg_publication WHERE pubname = $1", t.Publication).Scan(&pubinsert)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: publication %q does not exist; run 'cdc init' (as the outbox table's owner) to create it", ErrPublicationMissing, t.Publication)
	}
	if err != nil {
		return fmt.Errorf("reading publication %q: %w", t.Publication, err)
	}
	if t.TableLess {
		return nil // any publication carries logical messages
	}
	var covered bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_publication_tables WHERE pubname = $1 AND schemaname = $2 AND tablename = $3)",
		t.Publication, t.Outbox.Schema, t.Outbox.Name).Scan(&covered); err != nil {
		return fmt.Errorf("reading tables of publication %q: %w", t.Publication, err)
	}
	if !covered || !pubinsert {
		return fmt.Errorf("%w: publication %q exists but does not publish inserts of %s; run ALTER PUBLICATION %s ADD TABLE %s and make sure publish includes 'insert', or choose another postgres.publication",
			ErrPublicationUncovered, t.Publication, t.name(), pgx.Identifier{t.Publication}.Sanitize(), t.QualifiedTable())
	}
	return nil
}

// EnsurePublication creates the publication (FOR TABLE outbox WITH
// (publish = 'insert')) when missing, and checks an existing one covers
// the table's inserts. created is true when it was made now (`cdc init`).
func EnsurePublication(ctx context.Context, conn *pgx.Conn, t Target) (created bool, err error) {
	err = CheckPublication(ctx, conn, t)
	if !errors.Is(err, ErrPublicationMissing) {
		return false, err
	}
	sql := fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert')",
		pgx.Identifier{t.Publication}.Sanitize(), t.QualifiedTable())
	if t.TableLess {
		sql = "CREATE PUBLICATION " + pgx.Identifier{t.Publication}.Sanitize() // empty: pgoutput needs one by name
	}
	if _, err := conn.Exec(ctx, sql); err != nil {
		return false, explain(fmt.Errorf("creating publication %q: %w", t.Publication, err))
	}
	return true, nil
}

// SlotInfo is what pg_replication_slots says of a slot.
type SlotInfo struct {
	Exists         bool
	Plugin         string
	Database       string
	Active         bool
	ActivePID      int32
	ConfirmedFlush pglogrepl.LSN
	RestartLSN     pglogrepl.LSN
	// RetainedBytes is pg_current_wal_lsn() - restart_lsn: the WAL the slot
	// keeps on disk. LagBytes is pg_current_wal_lsn() - confirmed_flush_lsn.
	// On a standby, CurrentWAL is what it replayed
	// (pg_last_wal_replay_lsn()), and both count from there.
	RetainedBytes int64
	LagBytes      int64
	CurrentWAL    pglogrepl.LSN
	// WALStatus is pg_replication_slots.wal_status: reserved, extended,
	// unreserved (the WAL it needs is past max_slot_wal_keep_size: the
	// next checkpoint may remove it) or lost (it was removed: the slot is
	// invalidated). SafeWALSize is safe_wal_size, the WAL that may still
	// be written before the slot is in danger; nil when unlimited or lost.
	WALStatus   string
	SafeWALSize *int64
	// Invalidation is invalidation_reason (PostgreSQL 17+: wal_removed,
	// rows_removed, wal_level_insufficient, idle_timeout), "" when valid
	// or when the server does not say.
	Invalidation string
	// Conflicting is pg_replication_slots.conflicting (PostgreSQL 16+):
	// the slot was invalidated by a recovery conflict (rows_removed or
	// wal_level_insufficient), what a standby's slot meets; 16 gives no
	// invalidation_reason.
	Conflicting bool
}

// Invalid reports whether the server invalidated the slot: it can no
// longer stream, whatever its confirmed position (docs/design.md,
// "A lost slot"). On PostgreSQL 16, conflicting alone says so (its
// documentation: "conflicted with recovery (and so is now invalidated)").
func (s SlotInfo) Invalid() bool {
	return s.Exists && (s.WALStatus == "lost" || s.Invalidation != "" || s.Conflicting)
}

// currentWAL is the server's current WAL position: on a standby, which
// writes none, the last it replayed.
const currentWAL = "CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END"

// ReadSlot reads the slot's state.
func ReadSlot(ctx context.Context, conn *pgx.Conn, slot string) (SlotInfo, error) {
	var s SlotInfo
	var plugin, db *string
	var pid *int32
	var confirmed, restart *string
	var current string
	var walStatus, invalidation *string
	var conflicting *bool
	// to_jsonb reads invalidation_reason where the server has it (17+),
	// and conflicting (16+).
	err := conn.QueryRow(ctx, `SELECT plugin, database, active, active_pid, confirmed_flush_lsn::text, restart_lsn::text, w.lsn::text,
			COALESCE(pg_wal_lsn_diff(w.lsn, restart_lsn), 0)::bigint,
			COALESCE(pg_wal_lsn_diff(w.lsn, confirmed_flush_lsn), 0)::bigint,
			wal_status, safe_wal_size, to_jsonb(s) ->> 'invalidation_reason', (to_jsonb(s) ->> 'conflicting')::boolean
		FROM pg_replication_slots s, (SELECT `+currentWAL+` AS lsn) w WHERE slot_name = $1`, slot).
		Scan(&plugin, &db, &s.Active, &pid, &confirmed, &restart, &current, &s.RetainedBytes, &s.LagBytes,
			&walStatus, &s.SafeWALSize, &invalidation, &conflicting)
	if errors.Is(err, pgx.ErrNoRows) {
		if err := conn.QueryRow(ctx, "SELECT ("+currentWAL+")::text").Scan(&current); err != nil {
			return s, fmt.Errorf("reading current WAL position: %w", err)
		}
		s.CurrentWAL, _ = pglogrepl.ParseLSN(current)
		return s, nil
	}
	if err != nil {
		return s, fmt.Errorf("reading slot %q: %w", slot, err)
	}
	s.Exists = true
	if plugin != nil {
		s.Plugin = *plugin
	}
	if db != nil {
		s.Database = *db
	}
	if pid != nil {
		s.ActivePID = *pid
	}
	if confirmed != nil {
		s.ConfirmedFlush, _ = pglogrepl.ParseLSN(*confirmed)
	}
	if restart != nil {
		s.RestartLSN, _ = pglogrepl.ParseLSN(*restart)
	}
	if walStatus != nil {
		s.WALStatus = *walStatus
	}
	if invalidation != nil {
		s.Invalidation = *invalidation
	}
	s.Conflicting = conflicting != nil && *conflicting
	s.CurrentWAL, _ = pglogrepl.ParseLSN(current)
	return s, nil
}

// InvalidReason says in words why the server invalidated the slot, from
// its invalidation_reason (or wal_status lost where the server does not
// give a reason).
func (s SlotInfo) InvalidReason() string {
	switch s.Invalidation {
	case "":
		if s.Conflicting { // PostgreSQL 16
			return "a recovery conflict on the standby invalidated it (rows it still needed were vacuumed away on the primary: is hot_standby_feedback off? or wal_level was lowered on the primary)"
		}
		return "the WAL it still needed was removed (max_slot_wal_keep_size)"
	case "wal_removed":
		return "the WAL it still needed was removed (max_slot_wal_keep_size)"
	case "idle_timeout":
		return "it was not used for idle_replication_slot_timeout"
	case "rows_removed":
		return "rows it still needed were vacuumed away on the primary (a recovery conflict on the standby: is hot_standby_feedback off?)"
	case "wal_level_insufficient":
		return "wal_level was lowered below logical"
	}
	return s.Invalidation
}

// ReasonNote is ", invalidation_reason R" when the server gives the
// reason R the slot was invalidated, "" otherwise: for messages that name
// the slot's wal_status.
func (s SlotInfo) ReasonNote() string {
	if s.Invalidation == "" {
		if s.Conflicting {
			return ", conflicting" // PostgreSQL 16 gives no reason
		}
		return ""
	}
	return ", invalidation_reason " + s.Invalidation
}

// CheckSlot checks that the slot exists, uses pgoutput and belongs to this
// database, and returns its state. It creates nothing (`cdc run`).
func CheckSlot(ctx context.Context, conn *pgx.Conn, slot string) (SlotInfo, error) {
	info, err := ReadSlot(ctx, conn, slot)
	if err != nil {
		return info, err
	}
	if !info.Exists {
		return info, fmt.Errorf("%w: slot %q; run 'cdc init' (as a role with REPLICATION) to create it", ErrSlotMissing, slot)
	}
	if info.Invalid() {
		return info, fmt.Errorf("%w: slot %q (wal_status %s%s): %s, so what was committed after its confirmed position %s cannot be streamed from it; "+
			"the rows are still in the outbox table: stop every relay on the slot and run 'cdc recover' (a new slot, and every row not proven delivered relayed again)",
			ErrSlotInvalidated, slot, info.WALStatus, info.ReasonNote(), info.InvalidReason(), info.ConfirmedFlush)
	}
	if info.Plugin != "pgoutput" {
		return info, fmt.Errorf("%w: slot %q exists with plugin %q; walpost needs pgoutput: drop it (SELECT pg_drop_replication_slot('%s')) if nothing else uses it, or set postgres.slot to another name",
			ErrSlotPlugin, slot, info.Plugin, slot)
	}
	var db string
	if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
		return info, err
	}
	if info.Database != db {
		return info, fmt.Errorf("%w: slot %q belongs to database %q, not %q; set postgres.slot to another name",
			ErrSlotDatabase, slot, info.Database, db)
	}
	return info, nil
}

// EnsureSlot creates the pgoutput slot when missing and checks an existing
// one uses pgoutput in this database (`cdc init`). It returns the slot's
// state.
func EnsureSlot(ctx context.Context, conn *pgx.Conn, slot string) (info SlotInfo, created bool, err error) {
	return EnsureSlotWith(ctx, conn, slot, SlotOptions{})
}

// EnsureSlotWith is EnsureSlot creating the slot with opts.
func EnsureSlotWith(ctx context.Context, conn *pgx.Conn, slot string, opts SlotOptions) (info SlotInfo, created bool, err error) {
	info, err = CheckSlot(ctx, conn, slot)
	if !errors.Is(err, ErrSlotMissing) {
		return info, false, err
	}
	if _, err := conn.Exec(ctx, createSlotSQL(opts), slot); err != nil {
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42710" { // 42710: made meanwhile by another instance
			return info, false, explain(fmt.Errorf("creating replication slot %q: %w", slot, err))
		}
	} else {
		created = true
	}
	info, err = CheckSlot(ctx, conn, slot)
	return info, created, err
}

// explain adds what to do to server errors a user can fix.
func explain(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	switch pgErr.Code {
	case "42501": // insufficient_privilege
		return fmt.Errorf("%w (%w: the role needs ownership of the outbox table to create a publication, and REPLICATION to create a slot)", err, ErrPrivileges)
	case "53400": // configuration_limit_exceeded
		return fmt.Errorf("%w (raise max_replication_slots / max_wal_senders, or drop unused slots)", err)
	case "55000": // object_not_in_prerequisite_state, e.g. wal_level
		return fmt.Errorf("%w (is wal_level = logical?)", err)
	}
	return err
}
