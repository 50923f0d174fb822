package admin

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/coverage"
	"github.com/walpost/walpost/internal/layout"
	"github.com/walpost/walpost/internal/outboxdb"
	"github.com/walpost/walpost/internal/pgconnect"
	"github.com/walpost/walpost/internal/replication"
	"github.com/walpost/walpost/internal/retention"
	"github.com/walpost/walpost/internal/store"
	"github.com/walpost/walpost/outbox"
)

// Setup creates what the relay needs on the server and is missing (`cdc
// init`): the outbox table (default layout only), the publication, the
// slot, and the progress and dead-letter tables. It reports each object
// with report("table public.outbox: created"). It needs a role that may
// create them (the table's owner for the publication, REPLICATION for the
// slot); `cdc run` then only checks that they exist (see sql/roles.sql).
// Before it creates anything it refuses state tables that exist and that
// no trusted role owns (store.CheckOwners).
func Setup(ctx context.Context, cfg *config.Config, report func(string)) error {
	return SetupWith(ctx, cfg, SetupOptions{}, report)
}

// SetupOptions are `cdc init`'s options.
type SetupOptions struct {
	// Adopt: when the slot is created, rows already in the outbox whose
	// columns.sent_at is NULL (left unsent by the dispatcher walpost
	// replaces) are relayed once, before what is committed after the slot
	// (see createSlotAdopting). It needs columns.sent_at and a new slot.
	Adopt bool
	// Warn is told each warning, one line (a schema of the state tables
	// in which PUBLIC may CREATE); nil: report("warning: …").
	Warn func(string)
}

// SetupWith is Setup with options.
func SetupWith(ctx context.Context, cfg *config.Config, opts SetupOptions, report func(string)) error {
	if opts.Adopt {
		if err := checkAdoptConfig(cfg); err != nil {
			return err // before connecting
		}
	}
	// With postgres.primary_url the slot is made on the standby (url)
	// and everything else on the primary (docs/operations.md, "Decoding
	// from a standby"); conn is the primary's, src the slot's.
	conns, err := replication.OpenConns(ctx, cfg.Postgres.URL, cfg.Postgres.PrimaryURL)
	if err != nil {
		return err
	}
	defer conns.Close()
	conn, src := conns.State, conns.Slot
	for _, c := range conns.Topology.Cautions() {
		warnf(opts, report, c)
	}
	t := outboxdb.Target(cfg)
	if err := checkPrerequisites(ctx, conns, cfg); err != nil {
		return err // before anything is created
	}
	slotOpts, err := failoverSlotOptions(ctx, conn, cfg, opts)
	if err != nil {
		return err // before anything is created
	}
	if opts.Adopt {
		if err := checkAdoptServer(ctx, conn, cfg); err != nil {
			return err // before anything is created
		}
	}
	if err := checkOwners(ctx, conn, cfg, opts, report); err != nil {
		return err // before anything is created
	}
	if err := ensureTable(ctx, conn, cfg, t, report); err != nil {
		return err
	}
	if err := replication.CheckServer(ctx, conn, t); err != nil {
		return err
	}
	if conns.Standby() {
		if err := replication.CheckServer(ctx, src, replication.Target{TableLess: true}); err != nil {
			return fmt.Errorf("the standby (postgres.url): %w", err) // wal_level and REPLICATION there
		}
	}
	created, err := replication.EnsurePublication(ctx, conn, t)
	if err != nil {
		return err
	}
	report(fmt.Sprintf("publication %s: %s", t.Publication, createdOrExists(created)))
	if len(cfg.Postgres.MessageRoles) > 0 {
		if err := restrictEmit(ctx, conn, cfg.Postgres.MessageRoles); err != nil {
			return err
		}
		report(fmt.Sprintf("pg_logical_emit_message: EXECUTE taken from PUBLIC, granted to %s", strings.Join(cfg.Postgres.MessageRoles, ", ")))
	}
	before, err := slotBirth(ctx, conn, t)
	if err != nil {
		return err
	}
	slotCreated := true
	if opts.Adopt {
		n, err := createSlotAdopting(ctx, conn, cfg)
		if err != nil {
			return err
		}
		report(fmt.Sprintf("slot %s: created; %d unsent row(s) of %s adopted: cdc run relays them once, before what commits after this (stop the writers during --adopt to keep each key's order)", t.Slot, n, t.Outbox))
	} else if conns.Standby() {
		info, created, err := replication.EnsureSlotOnStandby(ctx, src, conn, t.Slot)
		if err != nil {
			return err
		}
		slotCreated = created
		report(fmt.Sprintf("slot %s: %s on the standby (confirmed %s); state tables and heartbeats on the primary (postgres.primary_url)", t.Slot, createdOrExists(created), info.ConfirmedFlush))
	} else {
		info, created, err := replication.EnsureSlotWith(ctx, conn, t.Slot, slotOpts)
		if err != nil {
			return err
		}
		slotCreated = created
		report(fmt.Sprintf("slot %s: %s (confirmed %s)", t.Slot, createdOrExists(created), info.ConfirmedFlush))
	}
	results, err := store.Setup(ctx, conn, store.TablesOf(cfg))
	for _, res := range results {
		line := fmt.Sprintf("table %s: %s", res.Table, createdOrExists(res.Created))
		if len(res.Upgraded) > 0 {
			line += "; upgraded: added " + strings.Join(res.Upgraded, ", ")
		}
		report(line)
	}
	if err == nil && slotCreated && !t.TableLess {
		err = recordSlotBirth(ctx, conn, cfg, before)
	}
	if s := retention.SettingsOf(cfg); s != nil && err == nil {
		err = setupRetention(ctx, conn, *s, slotCreated, report)
	}
	if err == nil {
		// Again: a table made by another role between the first check
		// and CREATE TABLE IF NOT EXISTS was reported "exists".
		_, err = store.CheckOwners(ctx, conn, store.TablesOf(cfg), store.TrustOf(cfg))
	}
	return err
}

// checkPrerequisites checks, before Setup creates anything, what would
// otherwise stop it halfway, with the table and the publication made and
// no slot: wal_level and the REPLICATION attribute (on the standby too,
// with postgres.primary_url), a slot of that name that walpost cannot use
// (of another database or plugin, invalidated) and, for a new slot, a
// free one under max_replication_slots. The slot's refusal comes first,
// also with --adopt ("belongs to database app; set postgres.slot").
func checkPrerequisites(ctx context.Context, conns *replication.Conns, cfg *config.Config) error {
	if _, err := replication.CheckReplication(ctx, conns.State); err != nil {
		return err
	}
	if conns.Standby() {
		if _, err := replication.CheckReplication(ctx, conns.Slot); err != nil {
			return fmt.Errorf("the standby (postgres.url): %w", err)
		}
	}
	info, err := replication.CheckSlot(ctx, conns.Slot, cfg.Postgres.Slot)
	switch {
	case err == nil, info.Exists:
		return err
	case !errors.Is(err, replication.ErrSlotMissing):
		return err
	}
	var used, max int
	if err := conns.Slot.QueryRow(ctx, "SELECT (SELECT count(*) FROM pg_replication_slots), current_setting('max_replication_slots')::int").Scan(&used, &max); err != nil {
		return fmt.Errorf("counting replication slots: %w", err)
	}
	if used >= max {
		return fmt.Errorf("slot %q cannot be created: the server's %d replication slots (max_replication_slots) are all in use; "+
			"drop an unused one (SELECT slot_name, database, active FROM pg_replication_slots lists them), or raise max_replication_slots and restart PostgreSQL",
			cfg.Postgres.Slot, max)
	}
	return nil
}

// warnf tells opts.Warn, else report, the warning w.
func warnf(opts SetupOptions, report func(string), w string) {
	if opts.Warn != nil {
		opts.Warn(w)
		return
	}
	report("warning: " + w)
}

// checkOwners refuses state tables, and triggers on them or on the outbox
// the relay writes, that no trusted role owns (store.CheckOwners), and
// warns of the state tables' schemas in which PUBLIC may CREATE.
func checkOwners(ctx context.Context, conn *pgx.Conn, cfg *config.Config, opts SetupOptions, report func(string)) error {
	open, err := store.CheckOwners(ctx, conn, store.TablesOf(cfg), store.TrustOf(cfg))
	warn := opts.Warn
	if warn == nil {
		warn = func(w string) { report("warning: " + w) }
	}
	for _, o := range open {
		warn(o.String())
	}
	return err
}

// CheckTrust refuses, as cdc init and cdc run do, state tables (and
// triggers on them or on the outbox the relay writes) that no trusted role
// owns (store.CheckOwners): the commands that read the state tables to
// decide what they publish, park or skip run it first, since a squatted
// dead-letter table is a list of messages of its owner's choosing.
func CheckTrust(ctx context.Context, cfg *config.Config) error {
	conn, err := pgconnect.Connect(ctx, cfg.Postgres.StateURL()) // the state tables' server (the primary when decoding from a standby)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = store.CheckOwners(ctx, conn, store.TablesOf(cfg), store.TrustOf(cfg))
	return err
}

// failoverSlotOptions returns how cdc init creates the slot, refusing
// postgres.failover_slot on a server without failover slots (before
// anything is created).
func failoverSlotOptions(ctx context.Context, conn *pgx.Conn, cfg *config.Config, opts SetupOptions) (replication.SlotOptions, error) {
	if !cfg.Postgres.FailoverSlot {
		return replication.SlotOptions{}, nil
	}
	if err := replication.CheckFailoverSupported(ctx, conn); err != nil {
		return replication.SlotOptions{}, err
	}
	if opts.Adopt {
		return replication.SlotOptions{}, fmt.Errorf("%w: run cdc init --adopt with postgres.failover_slot: false, then, with no relay running, "+
			"ALTER_REPLICATION_SLOT %s (FAILOVER true) on a replication connection, and set postgres.failover_slot: true again", ErrAdoptFailover, cfg.Postgres.Slot)
	}
	return replication.SlotOptions{Failover: true}, nil
}

// slotBirth reads, before the slot is created, what publishes the outbox
// and the server's time: every transaction the new slot streams commits
// after it.
func slotBirth(ctx context.Context, conn *pgx.Conn, t replication.Target) (coverage.Look, error) {
	if t.TableLess {
		return coverage.Look{}, nil
	}
	return coverage.Read(ctx, conn, t)
}

// recordSlotBirth starts the coverage table's row of a slot created now:
// what publishes the outbox, verified and safe (docs/design.md, "The
// publication or the table changing under the relay") at the time read
// before the slot existed.
func recordSlotBirth(ctx context.Context, conn *pgx.Conn, cfg *config.Config, c coverage.Look) error {
	return coverage.Save(ctx, conn, store.TablesOf(cfg), &coverage.Row{Seen: c.Seen, VerifiedAt: c.At, SafeAt: c.At})
}

// setupRetention creates relay.retention's marks table and, when the slot
// was created now, forgets the marks of an earlier slot of that name:
// the new slot starts at the current WAL, past every old mark, which
// would otherwise prove delivered rows the old slot never confirmed
// (docs/design.md, "Retention and delete-after-insert").
func setupRetention(ctx context.Context, conn *pgx.Conn, s retention.Settings, slotCreated bool, report func(string)) error {
	res, err := retention.Setup(ctx, conn, s)
	if err != nil {
		return err
	}
	report(fmt.Sprintf("table %s: %s", res.Table, createdOrExists(res.Created)))
	if !slotCreated || res.Created {
		return nil
	}
	n, err := retention.ForgetMarks(ctx, conn, s)
	if err != nil {
		return err
	}
	if n > 0 {
		report(fmt.Sprintf("table %s: %d mark(s) of an earlier slot %s deleted: they prove nothing for the new slot", res.Table, n, s.Slot))
	}
	return nil
}

func ensureTable(ctx context.Context, conn *pgx.Conn, cfg *config.Config, t replication.Target, report func(string)) error {
	if t.TableLess {
		report(fmt.Sprintf("postgres.source messages: no outbox table; the application emits prefix %q (outbox.Emit)", cfg.Postgres.MessagePrefix))
		return nil
	}
	exists, err := store.TableExists(ctx, conn, t.QualifiedTable())
	if err != nil {
		return err
	}
	if exists {
		report(fmt.Sprintf("table %s: exists", t.Outbox))
		return nil
	}
	if v, err := replication.CaseVariants(ctx, conn, t); err != nil {
		return err
	} else if len(v) > 0 {
		return errors.New(replication.CaseHint(t, v) + "; nothing was created")
	}
	cols := cfg.Columns.Layout()
	if !cols.Unscheduled().DefaultTable() {
		return errors.New("table " + t.Outbox.String() + " does not exist and columns: is not the default layout; create your table first (cdc init creates only the layout of sql/outbox.sql, with or without columns: {time: created_at}, deliver_at and expires_at)")
	}
	ddl := outbox.DDL(cfg.Postgres.Table)
	for _, r := range []layout.Role{layout.DeliverAt, layout.ExpiresAt} {
		if cols.Has(r) { // optional timestamptz columns, NULL for none
			ddl += "ALTER TABLE " + t.Outbox.Qualified() + " ADD COLUMN " + cols.Column(r) + " timestamptz NULL;\n"
		}
	}
	if _, err := conn.Exec(ctx, ddl); err != nil {
		return fmt.Errorf("creating table %s: %w", t.Outbox, err)
	}
	report(fmt.Sprintf("table %s: created", t.Outbox))
	return nil
}

func createdOrExists(created bool) string {
	if created {
		return "created"
	}
	return "exists"
}
