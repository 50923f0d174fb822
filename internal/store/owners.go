package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/layout"
	"github.com/walpost/walpost/internal/sqlident"
)

// Who owns the state tables (docs/security.md, "State tables: who owns
// them").
//
// Whoever owns a state table decides what the relay reads there and what
// its writes do: an adopt table seeded with the transaction ids to come
// makes the adopt messages of those transactions outbox rows; a progress
// table whose trigger pins a sink's position far ahead makes the relay
// skip rows and confirm the slot past them; a marks table with made-up
// marks makes relay.retention delete rows not delivered yet. Where PUBLIC
// may CREATE in a state table's schema (PostgreSQL 14's public schema,
// kept by pg_upgrade; any schema opened up), any role that can connect
// can make the table before `cdc init` does. CheckOwners, run by `cdc
// init` before it creates anything, by `cdc run` before it reads the slot
// and by the commands that read the state tables (admin.CheckTrust),
// refuses every such object that no trusted role owns.
//
// Trusted owners, for an object in schema S:
//
//   - the current role, and every role it is a member of (pg_auth_members,
//     recursively), except PostgreSQL's predefined roles (pg_monitor,
//     pg_read_all_data, …: anyone granted one of them may create objects
//     owned by it); pg_database_owner when the current role owns the
//     database;
//   - every superuser (they could do anything anyway);
//   - the owner of S (pg_namespace.nspowner; the database's owner when it
//     is pg_database_owner): it may drop any table in S and make another;
//   - the owner of the outbox table: it is the role cdc init runs as
//     (docs/operations.md), and it decides what the relay publishes;
//     unless PUBLIC may CREATE in the outbox's schema, where anyone may
//     have made it: there its owner must be trusted anyway, else the
//     outbox is refused;
//   - the roles of postgres.trusted_owners.
//
// Refused: a state table (or a partition or inheritance child of one,
// which its queries read too) owned by anyone else, or that is not a table
// (a view, a foreign table, …); a trigger (not an internal one: those of
// foreign keys) on a state table whose function anyone else owns; and,
// where the relay updates (columns.sent_at) or deletes (relay.retention)
// outbox rows, such a trigger on the outbox for those events. A rule on a
// table is owned by the table's owner, so the owner check covers rules.

// ErrUntrusted is wrapped by CheckOwners' refusals.
var ErrUntrusted = errors.New("store: not owned by a trusted role")

// Trigger events, as pg_trigger.tgtype has them (TRIGGER_TYPE_* in
// PostgreSQL's catalog/pg_trigger.h).
const (
	TriggerInsert   int16 = 1 << 2
	TriggerDelete   int16 = 1 << 3
	TriggerUpdate   int16 = 1 << 4
	TriggerTruncate int16 = 1 << 5

	anyEvent = TriggerInsert | TriggerDelete | TriggerUpdate | TriggerTruncate
)

// Trust is what CheckOwners takes from the config besides the state
// tables.
type Trust struct {
	// Outbox is the outbox table, quoted; "" for a table-less outbox. Its
	// owner is trusted.
	Outbox string
	// OutboxEvents are the trigger events of the relay's own writes to the
	// outbox: TriggerUpdate with columns.sent_at, TriggerDelete with
	// relay.retention; 0 when it only reads the table.
	OutboxEvents int16
	// Owners are postgres.trusted_owners.
	Owners []string
}

// TrustOf returns what cfg says of whom the relay trusts.
func TrustOf(cfg *config.Config) Trust {
	tr := Trust{Owners: cfg.Postgres.TrustedOwners}
	if cfg.Postgres.TableLess() {
		return tr
	}
	ob := cfg.Outbox()
	tr.Outbox = ob.Qualified()
	if ob.Columns.Has(layout.SentAt) {
		tr.OutboxEvents |= TriggerUpdate
	}
	if cfg.Relay.Retention != nil {
		tr.OutboxEvents |= TriggerDelete
	}
	return tr
}

// OpenSchema is a schema holding state tables in which PUBLIC may
// CREATE: a warning, not a refusal (the tables may be the right ones).
type OpenSchema struct {
	Schema string   // readable (sqlident.Readable)
	Tables []string // the state tables configured in it, quoted
}

// String is the warning, one line.
func (o OpenSchema) String() string {
	return fmt.Sprintf("PUBLIC may CREATE in schema %s, which holds walpost's state tables (%s): any role that can connect can make one "+
		"of them before cdc init does (cdc init and cdc run refuse a table or trigger no trusted role owns); run REVOKE CREATE ON SCHEMA %s FROM PUBLIC, "+
		"or move the tables to a schema of their own", o.Schema, strings.Join(o.Tables, ", "), o.Schema)
}

// CheckOwners refuses, with an error wrapping ErrUntrusted that names each
// object, its owner and the fixes, the state tables of t (and the
// outbox's triggers of tr.OutboxEvents) that no trusted owner owns (see
// the rule above). Missing tables are not its business (Setup creates
// them, Check says they are missing). It also returns the schemas of t's
// tables in which PUBLIC may CREATE, error or not. Read-only.
func CheckOwners(ctx context.Context, conn *pgx.Conn, t Tables, tr Trust) ([]OpenSchema, error) {
	objs := stateObjects(t)
	if tr.Outbox != "" {
		objs = append(objs, object{field: "postgres.table", quoted: tr.Outbox, outbox: true, events: tr.OutboxEvents})
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("checking who owns the state tables: %w", err)
	}
	defer tx.Rollback(context.Background())
	// The catalog as PostgreSQL has it: no look-alike of pg_roles or
	// pg_get_userbyid in a schema of the role's search_path stands in.
	if _, err := tx.Exec(ctx, "SET LOCAL search_path TO pg_catalog, pg_temp"); err != nil {
		return nil, fmt.Errorf("checking who owns the state tables: %w", err)
	}
	who, err := readTrusted(ctx, tx, tr.Owners)
	if err != nil {
		return nil, err
	}
	for i := range objs {
		o := &objs[i]
		if err := readObject(ctx, tx, o); err != nil {
			return nil, err
		}
		if !o.outbox || len(o.rels) == 0 {
			continue
		}
		r := o.rels[0]
		if o.openSchema, err = schemaOpen(ctx, tx, r.schema); err != nil {
			return nil, fmt.Errorf("%s: reading the privileges of schema %s: %w", o.field, sqlident.Readable(r.schema), err)
		}
		// Where PUBLIC may CREATE, anyone may have made the outbox before
		// the application's migrations did: its owner is trusted only when
		// it is trusted anyway (judge refuses the table otherwise).
		if !o.openSchema || who.owns(r.owner, r.schemaOwner) {
			who.outboxOwner = r.owner
		}
	}
	open, err := openSchemas(ctx, tx, objs)
	if err != nil {
		return nil, err
	}
	if problems := judge(objs, who); len(problems) > 0 {
		return open, fmt.Errorf("%w: %s", ErrUntrusted, strings.Join(problems, "; also: "))
	}
	return open, nil
}

// object is one table CheckOwners looks at, and what the catalog says of
// it.
type object struct {
	field  string // the setting naming it
	quoted string // as the config names it, quoted
	outbox bool   // the outbox: only its triggers on events count
	events int16  // the trigger events that run as the relay's role
	// openSchema: PUBLIC may CREATE in the outbox's schema (read for the
	// outbox only).
	openSchema bool
	// rels: the table, then the tables its queries read with it
	// (partitions, inheritance children); nil when it does not exist.
	rels     []relation
	triggers []trigger
}

// relation is one row of pg_class.
type relation struct {
	oid                 uint32
	name                string // schema.table, readable
	kind                string // relkind
	owner, schemaOwner  string
	schema, parentTable string // parentTable: "" for the table itself
}

// trigger is a non-internal row of pg_trigger and its function.
type trigger struct {
	name               string
	on                 relation
	events             int16 // tgtype
	function, funOwner string
}

func stateObjects(t Tables) []object {
	var objs []object
	for _, x := range []struct{ field, quoted string }{
		{"postgres.progress_table", t.Progress},
		{"postgres.dead_letter_table", t.DeadLetter},
		{"postgres.adopt_table", t.Adopt},
		{"postgres.coverage_table", t.Coverage},
		{MarksField, t.Marks},
	} {
		if x.quoted != "" {
			objs = append(objs, object{field: x.field, quoted: x.quoted, events: anyEvent})
		}
	}
	return objs
}

// trusted is who may own what CheckOwners looks at, but for each
// object's schema owner.
type trusted struct {
	role        string          // current_user
	roles       map[string]bool // role, its memberships, superusers, trusted_owners
	dbOwner     string          // the database's owner (pg_database_owner's member)
	outboxOwner string          // "" without an outbox table
}

// pgDatabaseOwner is the predefined role whose one member is the
// database's owner (PostgreSQL 14+), the owner of the public schema
// since PostgreSQL 15.
const pgDatabaseOwner = "pg_database_owner"

// owns reports whether owner is trusted for an object in a schema owned
// by schemaOwner.
func (w trusted) owns(owner, schemaOwner string) bool {
	switch {
	case owner == "":
		return false
	case w.roles[owner], owner == w.outboxOwner, owner == schemaOwner:
		return true
	case schemaOwner == pgDatabaseOwner && owner == w.dbOwner:
		return true
	case owner == pgDatabaseOwner && w.dbOwner != pgDatabaseOwner:
		return w.owns(w.dbOwner, schemaOwner) // its member decides
	}
	return false
}

// describe says whom w trusts for an object of schema (owned by
// schemaOwner), for messages.
func (w trusted) describe(schema, schemaOwner string) string {
	if schemaOwner == pgDatabaseOwner {
		schemaOwner += ": the database's owner, " + w.dbOwner
	}
	s := fmt.Sprintf("this role (%s), the roles it is a member of, superusers, the owner of schema %s (%s)", w.role, schema, schemaOwner)
	if w.outboxOwner != "" {
		s += fmt.Sprintf(", the outbox table's owner (%s)", w.outboxOwner)
	}
	return s + " and postgres.trusted_owners"
}

// fixOwner is the role a refused table should be given to: the outbox
// table's owner (cdc init runs as it), else the current role.
func (w trusted) fixOwner() string {
	if w.outboxOwner != "" {
		return sqlident.Readable(w.outboxOwner)
	}
	return sqlident.Readable(w.role)
}

// roleRow is a role readTrusted found: a superuser, or one the current
// role is a member of. predefined: made by initdb (an OID under
// FirstNormalObjectId, 16384: the predefined roles and the bootstrap
// superuser).
type roleRow struct {
	name                      string
	predefined, super, member bool
}

// trustedOf builds the trusted set: role; the roles it is a member of that
// PostgreSQL did not predefine; pg_database_owner when role owns the
// database; superusers; owners (postgres.trusted_owners).
func trustedOf(role, dbOwner string, rows []roleRow, owners []string) trusted {
	w := trusted{role: role, dbOwner: dbOwner, roles: map[string]bool{role: true}}
	for _, r := range rows {
		if r.super || r.member && !r.predefined {
			w.roles[r.name] = true
		}
	}
	if role == dbOwner {
		w.roles[pgDatabaseOwner] = true
	}
	for _, o := range owners {
		w.roles[o] = true
	}
	return w
}

func readTrusted(ctx context.Context, tx pgx.Tx, owners []string) (trusted, error) {
	var role, dbOwner string
	if err := tx.QueryRow(ctx, "SELECT current_user::text, pg_get_userbyid(datdba)::text FROM pg_database WHERE datname = current_database()").
		Scan(&role, &dbOwner); err != nil {
		return trusted{}, fmt.Errorf("reading the current role: %w", err)
	}
	// Not pg_has_role: it is true of every role for a superuser.
	rows, _ := tx.Query(ctx, `WITH RECURSIVE mine(oid) AS (
		SELECT oid FROM pg_roles WHERE rolname = current_user
	  UNION
		SELECT m.roleid FROM pg_auth_members m JOIN mine ON m.member = mine.oid
	)
	SELECT r.rolname::text, r.oid < 16384 /* FirstNormalObjectId */, r.rolsuper, r.oid IN (SELECT oid FROM mine)
	FROM pg_roles r WHERE r.rolsuper OR r.oid IN (SELECT oid FROM mine)`)
	found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (roleRow, error) {
		var x roleRow
		err := r.Scan(&x.name, &x.predefined, &x.super, &x.member)
		return x, err
	})
	if err != nil {
		return trusted{}, fmt.Errorf("reading the roles of %s: %w", role, err)
	}
	return trustedOf(role, dbOwner, found, owners), nil
}

// readObject fills in what the catalog says of o: the table and those read
// with it, and their triggers.
func readObject(ctx context.Context, tx pgx.Tx, o *object) error {
	const tree = `WITH RECURSIVE tree(oid, parent, depth) AS (
		SELECT to_regclass($1)::oid, 0::oid, 0
	  UNION ALL
		SELECT i.inhrelid, i.inhparent, t.depth + 1 FROM pg_inherits i JOIN tree t ON i.inhparent = t.oid
	) `
	rows, _ := tx.Query(ctx, tree+`SELECT c.oid::bigint, n.nspname::text, c.relname::text, c.relkind::text,
			pg_get_userbyid(c.relowner)::text, pg_get_userbyid(n.nspowner)::text, coalesce(pn.nspname::text, ''), coalesce(p.relname::text, '')
		FROM tree JOIN pg_class c ON c.oid = tree.oid JOIN pg_namespace n ON n.oid = c.relnamespace
		LEFT JOIN pg_class p ON p.oid = tree.parent LEFT JOIN pg_namespace pn ON pn.oid = p.relnamespace
		ORDER BY tree.depth, c.oid`, o.quoted)
	rels, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (relation, error) {
		var x relation
		var oid int64
		var rel, parentSchema, parent string
		err := r.Scan(&oid, &x.schema, &rel, &x.kind, &x.owner, &x.schemaOwner, &parentSchema, &parent)
		x.oid, x.name = uint32(oid), sqlident.Readable(x.schema, rel)
		if parent != "" {
			x.parentTable = sqlident.Readable(parentSchema, parent)
		}
		return x, err
	})
	if err != nil {
		return fmt.Errorf("%s: reading the owner of %s: %w", o.field, o.quoted, err)
	}
	o.rels = dedupe(rels)
	if len(o.rels) == 0 {
		return nil
	}
	rows, _ = tx.Query(ctx, tree+`SELECT t.tgrelid::bigint, t.tgname::text, t.tgtype, fn.nspname::text, f.proname::text, pg_get_userbyid(f.proowner)::text
		FROM tree JOIN pg_trigger t ON t.tgrelid = tree.oid JOIN pg_proc f ON f.oid = t.tgfoid JOIN pg_namespace fn ON fn.oid = f.pronamespace
		WHERE NOT t.tgisinternal ORDER BY tree.depth, t.tgrelid, t.tgname`, o.quoted)
	trigs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (trigger, error) {
		var x trigger
		var rel int64
		var schema, fn string
		err := r.Scan(&rel, &x.name, &x.events, &schema, &fn, &x.funOwner)
		x.function = sqlident.Readable(schema, fn) + "()"
		for _, r := range o.rels {
			if r.oid == uint32(rel) {
				x.on = r
			}
		}
		return x, err
	})
	if err != nil {
		return fmt.Errorf("%s: reading the triggers of %s: %w", o.field, o.quoted, err)
	}
	o.triggers = dedupeTriggers(trigs)
	return nil
}

// dedupe drops the second sight of a table (multiple inheritance).
func dedupe(rels []relation) []relation {
	var out []relation
	for _, r := range rels {
		if !slices.ContainsFunc(out, func(x relation) bool { return x.oid == r.oid }) {
			out = append(out, r)
		}
	}
	return out
}

func dedupeTriggers(ts []trigger) []trigger {
	var out []trigger
	for _, t := range ts {
		if !slices.ContainsFunc(out, func(x trigger) bool { return x.on.oid == t.on.oid && x.name == t.name }) {
			out = append(out, t)
		}
	}
	return out
}

// openSchemas returns the schemas of objs' state tables (not the outbox)
// in which PUBLIC may CREATE, existing or not.
func openSchemas(ctx context.Context, tx pgx.Tx, objs []object) ([]OpenSchema, error) {
	var out []OpenSchema
	for _, o := range objs {
		if o.outbox {
			continue
		}
		parts, err := sqlident.Split(o.quoted)
		if err != nil || len(parts) != 2 {
			continue // validated before; lookups of it fail loudly
		}
		schema := sqlident.Readable(parts[0])
		if i := slices.IndexFunc(out, func(x OpenSchema) bool { return x.Schema == schema }); i >= 0 {
			out[i].Tables = append(out[i].Tables, o.quoted)
			continue
		}
		open, err := schemaOpen(ctx, tx, parts[0])
		if err != nil {
			return nil, fmt.Errorf("%s: reading the privileges of schema %s: %w", o.field, schema, err)
		}
		if open {
			out = append(out, OpenSchema{Schema: schema, Tables: []string{o.quoted}})
		}
	}
	return out, nil
}

// schemaOpen reports whether PUBLIC may CREATE in the schema called name
// (false when there is none).
func schemaOpen(ctx context.Context, tx pgx.Tx, name string) (bool, error) {
	var open bool
	// 'public' names the PUBLIC pseudo-role here (a role cannot be called
	// public).
	err := tx.QueryRow(ctx, "SELECT coalesce(bool_or(has_schema_privilege('public', oid, 'CREATE')), false) FROM pg_namespace WHERE nspname = $1", name).Scan(&open)
	return open, err
}

// judge returns, one sentence each, what of objs w does not trust.
func judge(objs []object, w trusted) []string {
	var out []string
	for _, o := range objs {
		if !o.outbox {
			for _, r := range o.rels {
				if p := judgeTable(o.field, r, w); p != "" {
					out = append(out, p)
				}
			}
		} else if r := o.rels; len(r) > 0 && o.openSchema && !w.owns(r[0].owner, r[0].schemaOwner) {
			out = append(out, judgeOpenOutbox(o.field, r[0], w))
		}
		for _, t := range o.triggers {
			if t.events&o.events == 0 || w.owns(t.funOwner, t.on.schemaOwner) {
				continue
			}
			why := "it runs with the privileges of whoever writes the table: the relay's role, cdc init and the operator's commands"
			if o.outbox {
				why = "it runs as the relay's role when the relay " + outboxWrites(t.events&o.events)
			}
			out = append(out, fmt.Sprintf("%s: trigger %s on table %s runs function %s, owned by %s, whom walpost does not trust (it trusts %s): %s. "+
				"Run DROP TRIGGER %s ON %s, or, if %s may own the function, add it to postgres.trusted_owners",
				o.field, sqlident.Readable(t.name), t.on.name, t.function, sqlident.Readable(t.funOwner), w.describe(t.on.schema, t.on.schemaOwner), why,
				sqlident.Readable(t.name), t.on.name, sqlident.Readable(t.funOwner)))
		}
	}
	return out
}

// judgeTable returns what is wrong with r, a state table or one read with
// it, "" when nothing.
func judgeTable(field string, r relation, w trusted) string {
	what := "table " + r.name
	if r.parentTable != "" {
		what = fmt.Sprintf("table %s, which queries of %s read too (a partition or inheritance child),", r.name, r.parentTable)
	}
	if r.kind != "r" && r.kind != "p" {
		kind, drop := relkindName(r.kind)
		return fmt.Sprintf("%s: %s is a %s, not a table (owned by %s): walpost keeps its state in a table it trusts; run %s %s and cdc init again",
			field, strings.TrimPrefix(what, "table "), kind, sqlident.Readable(r.owner), drop, r.name)
	}
	if w.owns(r.owner, r.schemaOwner) {
		return ""
	}
	owner := sqlident.Readable(r.owner)
	return fmt.Sprintf("%s: %s is owned by %s, whom walpost does not trust (it trusts %s); its owner decides what the relay reads there "+
		"and what its writes do. If the table is yours, run ALTER TABLE %s OWNER TO %s as a superuser; else DROP TABLE %s (as a superuser or the schema's owner) "+
		"and run cdc init again; or, if %s may own it, add it to postgres.trusted_owners",
		field, what, owner, w.describe(r.schema, r.schemaOwner), r.name, w.fixOwner(), r.name, owner)
}

// judgeOpenOutbox is the refusal of an outbox table that no trusted role
// owns, in a schema where PUBLIC may CREATE.
func judgeOpenOutbox(field string, r relation, w trusted) string {
	owner := sqlident.Readable(r.owner)
	schema := sqlident.Readable(r.schema)
	return fmt.Sprintf("%s: the outbox table %s is owned by %s, whom walpost does not trust otherwise (it trusts %s), in schema %s, where PUBLIC may CREATE: "+
		"any role that can connect may have made it before your migrations did, and its owner decides what the relay publishes (and which state tables it trusts). "+
		"If %s is your application's role, add it to postgres.trusted_owners; else move the data to a table you own (ALTER TABLE %s OWNER TO %s as a superuser once you have checked its triggers and rules). "+
		"Run REVOKE CREATE ON SCHEMA %s FROM PUBLIC either way",
		field, r.name, owner, w.describe(r.schema, r.schemaOwner), schema, owner, r.name, w.fixOwner(), schema)
}

// relkindName names a pg_class.relkind and the command that drops it.
func relkindName(k string) (string, string) {
	switch k {
	case "v":
		return "view", "DROP VIEW"
	case "m":
		return "materialized view", "DROP MATERIALIZED VIEW"
	case "f":
		return "foreign table", "DROP FOREIGN TABLE"
	case "S":
		return "sequence", "DROP SEQUENCE"
	case "i", "I":
		return "index", "DROP INDEX"
	case "c":
		return "composite type", "DROP TYPE"
	}
	return "relation of kind " + k, "DROP"
}

// outboxWrites says which of the relay's writes to the outbox events are.
func outboxWrites(events int16) string {
	var w []string
	if events&TriggerUpdate != 0 {
		w = append(w, "marks rows sent (columns.sent_at)")
	}
	if events&TriggerDelete != 0 {
		w = append(w, "deletes delivered rows (relay.retention)")
	}
	return strings.Join(w, " and ")
}
