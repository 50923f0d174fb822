package store

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

// TestTrustedOwnersAreTheRoleItsGroupsSuperusersAndTheConfigs: the role,
// the roles it is a member of, superusers and postgres.trusted_owners are
// trusted; a predefined role it is a member of (pg_monitor: anyone given
// it may create objects owned by it) is not; pg_database_owner is trusted
// only when the role owns the database.
func TestTrustedOwnersAreTheRoleItsGroupsSuperusersAndTheConfigs(t *testing.T) {
	rows := []roleRow{
		{name: "walpost_admins", member: true},
		{name: "pg_monitor", member: true, predefined: true},
		{name: "postgres", super: true, predefined: true},
		{name: "dba", super: true},
	}
	w := trustedOf("walpost_relay", "app", rows, []string{"deploy"})
	want := []string{"dba", "deploy", "postgres", "walpost_admins", "walpost_relay"}
	if got := slices.Sorted(maps.Keys(w.roles)); !slices.Equal(got, want) {
		t.Errorf("trusted roles %v, want %v", got, want)
	}
	if w = trustedOf("app", "app", rows, nil); !w.roles[pgDatabaseOwner] {
		t.Errorf("the database's owner is not trusted with what pg_database_owner owns: %v", w.roles)
	}
}

// TestOwnsTrustsTheSchemaOwnerTheOutboxOwnerAndTheDatabaseOwnerOfPublic:
// besides the trusted roles, an object's schema owner (the database's
// owner when that is pg_database_owner, as public's since PostgreSQL 15)
// and the outbox table's owner may own it; nobody else, and no empty
// owner.
func TestOwnsTrustsTheSchemaOwnerTheOutboxOwnerAndTheDatabaseOwnerOfPublic(t *testing.T) {
	w := trusted{role: "relay", roles: map[string]bool{"relay": true, "postgres": true}, dbOwner: "app", outboxOwner: "migrator"}
	for _, c := range []struct {
		owner, schemaOwner string
		want               bool
	}{
		{"relay", "x", true},
		{"postgres", "x", true},
		{"migrator", "x", true}, // the outbox's owner
		{"ops", "ops", true},    // the schema's owner
		{"app", pgDatabaseOwner, true},
		{pgDatabaseOwner, pgDatabaseOwner, true},
		{"app", "x", false},           // the database's owner, of a schema it does not own
		{pgDatabaseOwner, "x", false}, // its member, app, is not trusted there
		{"mallory", pgDatabaseOwner, false},
		{"mallory", "x", false},
		{"", "", false},
	} {
		if got := w.owns(c.owner, c.schemaOwner); got != c.want {
			t.Errorf("owns(%q, schema owner %q) = %v, want %v", c.owner, c.schemaOwner, got, c.want)
		}
	}
	if (trusted{roles: map[string]bool{}}).owns("x", "y") {
		t.Error("with no outbox table, its owner \"\" made another role trusted")
	}
}

// TestJudgeRefusesWhatNoTrustedRoleOwns: a state table of an untrusted
// owner (with the ALTER TABLE, DROP TABLE and postgres.trusted_owners
// fixes), a view in a state table's place whoever owns it, a partition of
// an untrusted owner, a trigger on a state table whose function an
// untrusted role owns, and on the outbox a trigger for the relay's own
// writes (not for INSERT, which the relay does not do) are each refused;
// a missing table, trusted tables and trusted functions are not.
func TestJudgeRefusesWhatNoTrustedRoleOwns(t *testing.T) {
	w := trusted{role: "relay", roles: map[string]bool{"relay": true}, dbOwner: "postgres", outboxOwner: "app"}
	rel := func(name, kind, owner string) relation {
		schema, _, _ := strings.Cut(name, ".")
		return relation{name: name, kind: kind, owner: owner, schema: schema, schemaOwner: "postgres"}
	}
	trig := func(name string, on relation, events int16, funOwner string) trigger {
		return trigger{name: name, on: on, events: events, function: "sq.f()", funOwner: funOwner}
	}
	progress := rel("sq.progress", "r", "app")
	part := rel("sq.progress_1", "r", "mallory")
	part.parentTable = "sq.progress"
	outbox := rel("public.outbox", "r", "app")
	objs := []object{
		{field: "postgres.adopt_table", rels: []relation{rel("sq.adopt", "r", "mallory")}, events: anyEvent},
		{field: "postgres.coverage_table", rels: []relation{rel("sq.coverage", "v", "relay")}, events: anyEvent},
		{field: "postgres.progress_table", rels: []relation{progress, part}, events: anyEvent,
			triggers: []trigger{trig("pin", progress, TriggerUpdate, "mallory"), trig("audit", progress, TriggerInsert, "app")}},
		{field: "postgres.dead_letter_table", events: anyEvent}, // missing: Setup makes it
		{field: "relay.retention.marks_table", rels: []relation{rel("sq.marks", "p", "postgres")}, events: anyEvent},
		{field: "postgres.table", outbox: true, rels: []relation{outbox}, events: TriggerUpdate,
			triggers: []trigger{trig("on_insert", outbox, TriggerInsert, "mallory"), trig("on_update", outbox, TriggerUpdate|TriggerInsert, "mallory")}},
	}
	got := judge(objs, w)
	want := [][]string{
		{"postgres.adopt_table: table sq.adopt is owned by mallory", "ALTER TABLE sq.adopt OWNER TO app", "DROP TABLE sq.adopt", "add it to postgres.trusted_owners"},
		{"postgres.coverage_table: sq.coverage is a view, not a table (owned by relay)", "DROP VIEW sq.coverage"},
		{"postgres.progress_table: table sq.progress_1, which queries of sq.progress read too (a partition or inheritance child), is owned by mallory"},
		{"postgres.progress_table: trigger pin on table sq.progress runs function sq.f(), owned by mallory", "DROP TRIGGER pin ON sq.progress"},
		{"postgres.table: trigger on_update on table public.outbox runs function sq.f(), owned by mallory", "when the relay marks rows sent (columns.sent_at)"},
	}
	if len(got) != len(want) {
		t.Fatalf("%d refusals, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i, parts := range want {
		for _, p := range parts {
			if !strings.Contains(got[i], p) {
				t.Errorf("refusal %d does not say %q:\n%s", i, p, got[i])
			}
		}
	}
	if got := judge(objs[3:5], w); len(got) != 0 {
		t.Errorf("a missing table and a trusted one refused: %v", got)
	}
}

// TestJudgeRefusesAnOutboxOfAnUntrustedOwnerInAnOpenSchema: in a schema
// where PUBLIC may CREATE, an outbox whose owner is trusted no other way
// is refused (CheckOwners then leaves outboxOwner unset, so it makes no
// state table trusted either); the same outbox in a closed schema, or
// owned by a trusted role, is not.
func TestJudgeRefusesAnOutboxOfAnUntrustedOwnerInAnOpenSchema(t *testing.T) {
	w := trusted{role: "postgres", roles: map[string]bool{"postgres": true, "app": true}, dbOwner: "postgres"}
	ob := func(owner string, open bool) []object {
		r := relation{name: "public.outbox", kind: "r", owner: owner, schema: "public", schemaOwner: "postgres"}
		return []object{{field: "postgres.table", outbox: true, openSchema: open, rels: []relation{r}}}
	}
	got := judge(ob("mallory", true), w)
	if len(got) != 1 {
		t.Fatalf("%d refusals of mallory's outbox in an open schema, want 1: %v", len(got), got)
	}
	for _, want := range []string{"postgres.table: the outbox table public.outbox is owned by mallory", "where PUBLIC may CREATE",
		"postgres.trusted_owners", "ALTER TABLE public.outbox OWNER TO postgres", "REVOKE CREATE ON SCHEMA public FROM PUBLIC"} {
		if !strings.Contains(got[0], want) {
			t.Errorf("the refusal does not say %q: %s", want, got[0])
		}
	}
	if got := judge(ob("mallory", false), w); len(got) != 0 {
		t.Errorf("an outbox in a closed schema refused: %v", got)
	}
	if got := judge(ob("app", true), w); len(got) != 0 {
		t.Errorf("a trusted role's outbox in an open schema refused: %v", got)
	}
}

// TestTrustOfTheConfig: the outbox's triggers matter for UPDATE with
// columns.sent_at and for DELETE with relay.retention, not otherwise; a
// table-less outbox has none; postgres.trusted_owners is taken as is; the
// marks table is a state table with retention.
func TestTrustOfTheConfig(t *testing.T) {
	for _, c := range []struct {
		yaml   string
		events int16
	}{
		{"", 0},
		{"columns: {sent_at: sent_at}\n", TriggerUpdate},
		{"relay:\n  retention: {keep: 1h}\n", TriggerDelete},
		{"columns: {sent_at: sent_at}\nrelay:\n  retention: {keep: 1h}\n", TriggerUpdate | TriggerDelete},
	} {
		cfg := parseConfig(t, "  trusted_owners: [ops, Deploy]\n"+c.yaml)
		tr := TrustOf(cfg)
		if tr.Outbox != `"public"."outbox"` || tr.OutboxEvents != c.events || !slices.Equal(tr.Owners, []string{"ops", "Deploy"}) {
			t.Errorf("%q: %+v, want the outbox with events %b", c.yaml, tr, c.events)
		}
		if marks := TablesOf(cfg).Marks; (marks != "") != (c.events&TriggerDelete != 0) {
			t.Errorf("%q: marks table %q", c.yaml, marks)
		}
	}
	if tr := TrustOf(parseConfig(t, "  source: messages\n")); tr.Outbox != "" || tr.OutboxEvents != 0 {
		t.Errorf("table-less outbox: %+v", tr)
	}
}

// TestOpenSchemaWarningIsOneLineWithTheFix: the warning names the schema,
// its state tables and the REVOKE to run, on one line.
func TestOpenSchemaWarningIsOneLineWithTheFix(t *testing.T) {
	s := OpenSchema{Schema: "public", Tables: []string{"public.walpost_adopt", "public.walpost_sink_progress"}}.String()
	for _, want := range []string{"PUBLIC may CREATE in schema public", "public.walpost_adopt, public.walpost_sink_progress", "REVOKE CREATE ON SCHEMA public FROM PUBLIC"} {
		if !strings.Contains(s, want) {
			t.Errorf("the warning does not say %q: %s", want, s)
		}
	}
	if strings.Contains(s, "\n") {
		t.Errorf("the warning is not one line: %q", s)
	}
}
