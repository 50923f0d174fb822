package store

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/sqlident"
)

// Tables names a slot's state tables.
type Tables struct {
	Slot string
	// Progress and DeadLetter are quoted, schema-qualified names; Progress
	// is "" when per-sink progress is disabled (progress_table: "-").
	Progress, DeadLetter string
	// ProgressName and DeadLetterName are the names as configured, for
	// messages.
	ProgressName, DeadLetterName string
	// Adopt is the adopt table (postgres.adopt_table), quoted, "" for a
	// table-less outbox (it has no rows to adopt); AdoptName as configured.
	Adopt, AdoptName string
	// Coverage is the coverage table, quoted, "" when kept in memory only
	// (coverage_table: "-", or a table-less outbox).
	Coverage string
	// Marks is relay.retention's marks table (marks.go), quoted, "" when
	// retention is off; MarksName as configured.
	Marks, MarksName string
}

// TablesOf returns the tables cfg names.
func TablesOf(cfg *config.Config) Tables {
	t := Tables{Slot: cfg.Postgres.Slot,
		Progress: quote(cfg.Postgres.ProgressTable), ProgressName: cfg.Postgres.ProgressTable,
		DeadLetter: quote(cfg.Postgres.DeadLetterTable), DeadLetterName: cfg.Postgres.DeadLetterTable,
		Adopt: quote(adoptTable(cfg)), AdoptName: cfg.Postgres.AdoptTable,
		Coverage: quote(coverageTable(cfg))}
	if r := cfg.Relay.Retention; r != nil {
		t.Marks, t.MarksName = quote(r.MarksTable), r.MarksTable
	}
	return t
}

func adoptTable(cfg *config.Config) string {
	if cfg.Postgres.TableLess() {
		return ""
	}
	return cfg.Postgres.AdoptTable
}

func coverageTable(cfg *config.Config) string {
	if cfg.Postgres.TableLess() {
		return ""
	}
	return cfg.Postgres.CoverageTable
}

func quote(t string) string {
	if t == "" || t == "-" {
		return ""
	}
	parts, err := sqlident.Split(t)
	if err != nil {
		return pgx.Identifier{t}.Sanitize() // validated before; a lookup fails loudly
	}
	return sqlident.Readable(parts...)
}

const progressDDL = `CREATE TABLE IF NOT EXISTS %s (
    slot       text        NOT NULL,
    sink       text        NOT NULL,
    commit_lsn  pg_lsn      NOT NULL,
    lsn         pg_lsn      NOT NULL,
    seq         bigint      NOT NULL DEFAULT 0,
    commit_time timestamptz,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    failing_since timestamptz,
    last_error    text,
    last_error_at timestamptz,
    PRIMARY KEY (slot, sink)
)`

// deadLetterDDL is the dead-letter table. sink is ” for a row that cannot
// be mapped (parked for every sink), or the name of the sink that refused
// the message; row_data is then the message as the file sink writes it
// (id, type, key, payload, headers, lsn, ...). seq tells apart the rows of
// one multi-insert WAL record, which share lsn (message.Message.Seq).
// resent_at is set by `cdc dead-letter resend` (parked.go). hold_key is
// the ordering key a row holds or is held under (relay.on_invalid or
// on_refused: hold_key; hold.go), held_behind the position of the row it
// waits for when it was parked only because its key was held. Tables made
// by an older walpost get the columns and key they lack from Upgrade.
const deadLetterDDL = `CREATE TABLE IF NOT EXISTS %s (
    slot       text        NOT NULL,
    lsn        pg_lsn      NOT NULL,
    seq        bigint      NOT NULL DEFAULT 0,
    sink       text        NOT NULL DEFAULT '',
    commit_lsn pg_lsn      NOT NULL,
    message_id text,
    error      text        NOT NULL,
    row_data   jsonb       NOT NULL,
    parked_at  timestamptz NOT NULL DEFAULT now(),
    resent_at  timestamptz,
    hold_key   text,
    held_behind text,
    PRIMARY KEY (slot, lsn, seq, sink)
)`

// Result says what Setup did with one table.
type Result struct {
	Table   string
	Created bool
	// Upgraded lists what was added to a table made by an older walpost
	// (columns, the dead-letter table's new key); nil when nothing.
	Upgraded []string
}

// Setup creates the tables that are missing, and upgrades the progress
// and dead-letter tables an older walpost made (upgrade.go).
func Setup(ctx context.Context, conn *pgx.Conn, t Tables) ([]Result, error) {
	var out []Result
	for _, x := range []struct {
		table, ddl, field string
		upgrade           bool
	}{
		{t.Progress, progressDDL, "postgres.progress_table", true},
		{t.DeadLetter, deadLetterDDL, "postgres.dead_letter_table", true},
		{t.Adopt, adoptDDL, "postgres.adopt_table", false},
		{t.Coverage, coverageDDL, "postgres.coverage_table", false},
	} {
		if x.table == "" {
			continue
		}
		created, err := ensure(ctx, conn, x.table, x.ddl, x.field)
		if err != nil {
			return out, err
		}
		res := Result{Table: x.table, Created: created}
		if !created && x.upgrade {
			if res.Upgraded, err = upgrade(ctx, conn, x.table, x.table == t.DeadLetter); err != nil {
				return out, fmt.Errorf("%s: upgrading %s: %w", x.field, x.table, err)
			}
		}
		out = append(out, res)
	}
	return out, nil
}

// ensure creates table (quoted) with ddl when it is missing and reports
// whether it did; field names the setting in errors.
func ensure(ctx context.Context, conn *pgx.Conn, table, ddl, field string) (bool, error) {
	exists, err := TableExists(ctx, conn, table)
	if err != nil {
		return false, fmt.Errorf("%s: %w", field, err)
	}
	if exists {
		return false, nil
	}
	if _, err := conn.Exec(ctx, fmt.Sprintf(ddl, table)); err != nil {
		if createdMeanwhile(ctx, conn, table, err) {
			return false, nil
		}
		return false, fmt.Errorf("%s: creating %s: %w", field, table, err)
	}
	return true, nil
}

// createdMeanwhile reports whether err, from creating table, says that
// another session created it at the same time (two cdc init at once):
// CREATE TABLE IF NOT EXISTS racing another fails on the catalog's unique
// index (unique_violation), on the table's row type (duplicate_object) or
// on the table (duplicate_table), and the table is there now.
func createdMeanwhile(ctx context.Context, conn *pgx.Conn, table string, err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || (pe.Code != "23505" && pe.Code != "42710" && pe.Code != "42P07") {
		return false
	}
	exists, _ := TableExists(ctx, conn, table)
	return exists
}

// ErrMissing, ErrGrant and ErrUpgrade are wrapped by Check's errors.
var (
	ErrMissing = errors.New("store: table missing")
	ErrGrant   = errors.New("store: privilege missing")
	ErrUpgrade = errors.New("store: table made by an older walpost")
)

// Check verifies that the tables exist and that the current role may use
// them as the relay does: SELECT, INSERT and UPDATE on the progress table,
// SELECT and INSERT on the dead-letter table. A missing dead-letter table
// is an error only when deadLetter is set (a dead_letter policy is on);
// without it, `cdc skip` has nowhere to park and the relay has nothing to
// look up. Who owns them is CheckOwners' business.
func Check(ctx context.Context, conn *pgx.Conn, t Tables, deadLetter bool) error {
	if t.Progress != "" {
		if err := checkTable(ctx, conn, t.Progress, t.ProgressName, "postgres.progress_table", []string{"SELECT", "INSERT", "UPDATE"}, true,
			` (or set postgres.progress_table: "-" to keep no per-sink progress)`); err != nil {
			return err
		}
		if err := checkUpgraded(ctx, conn, t.Progress, t.ProgressName, "postgres.progress_table", false); err != nil {
			return err
		}
	}
	if err := checkTable(ctx, conn, t.DeadLetter, t.DeadLetterName, "postgres.dead_letter_table", []string{"SELECT", "INSERT"}, deadLetter, ""); err != nil {
		return err
	}
	// Missing: an outbox set up before it (the relay says so, and takes
	// adopt messages from any transaction until cdc init creates it).
	if t.Adopt != "" {
		if err := checkTable(ctx, conn, t.Adopt, t.AdoptName, "postgres.adopt_table", []string{"SELECT"}, false, ""); err != nil {
			return err
		}
	}
	return checkUpgraded(ctx, conn, t.DeadLetter, t.DeadLetterName, "postgres.dead_letter_table", true)
}

func checkTable(ctx context.Context, conn *pgx.Conn, table, name, field string, privs []string, required bool, alt string) error {
	exists, err := TableExists(ctx, conn, table)
	if err != nil {
		return fmt.Errorf("%s: %w", field, err)
	}
	if !exists {
		if !required {
			return nil
		}
		return fmt.Errorf("%w: %s: table %s does not exist; run 'cdc init' (as a role that may create it)%s", ErrMissing, field, name, alt)
	}
	var missing []string
	for _, p := range privs {
		var ok bool
		if err := conn.QueryRow(ctx, "SELECT has_table_privilege($1, $2)", table, p).Scan(&ok); err != nil {
			return fmt.Errorf("%s: checking privileges on %s: %w", field, table, err)
		}
		if !ok {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		var role string
		if err := conn.QueryRow(ctx, "SELECT current_user").Scan(&role); err != nil {
			return err
		}
		return fmt.Errorf("%w: %s: role %s lacks %s on %s; run GRANT %s ON %s TO %s (see sql/roles.sql)",
			ErrGrant, field, role, strings.Join(missing, ", "), name, strings.Join(privs, ", "), table, sqlident.Readable(role))
	}
	return nil
}

// TableExists reports whether table (quoted) exists.
func TableExists(ctx context.Context, conn *pgx.Conn, table string) (bool, error) {
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&exists); err != nil {
		return false, fmt.Errorf("looking up %s: %w", table, err)
	}
	return exists, nil
}
