package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/relaytest"
	"github.com/walpost/walpost/outbox"
)

// squat is a test's own schema for walpost's state tables (all four of
// them), open to PUBLIC (USAGE and CREATE, as PostgreSQL 14's public
// schema, kept by pg_upgrade) or not, and a role that can only log in:
// one that can connect, nothing more. The outbox is the test's own in
// public, owned by postgres, as are the schema and the slot. Or, made by
// newSquatInPublic, the state tables go in the database's public schema
// as the server made it (PostgreSQL 14: PUBLIC may CREATE there; 15+
// not), with names of the test's own.
type squat struct {
	url, schema string
	pin         string // the squatter's trigger function
	ob          relaytest.Outbox
	cfg, out    string
	// attacker is a role with LOGIN only; attackerURL connects as it.
	attacker, attackerURL string
	progress, deadLetter  string
	adopt, coverage       string
}

func newSquat(t *testing.T, open bool) *squat {
	t.Helper()
	return newSquatOn(t, pgtest.URL(t), open)
}

// newSquatOn is newSquat on the database at url.
func newSquatOn(t *testing.T, url string, open bool) *squat {
	t.Helper()
	s := &squat{url: url, ob: relaytest.NewOutbox(t, url), schema: pgtest.Name(t, "sq"), attacker: pgtest.Name(t, "mallory")}
	s.attackerURL = strings.Replace(url, "postgres@", s.attacker+"@", 1)
	s.progress, s.deadLetter = s.schema+".walpost_sink_progress", s.schema+".walpost_dead_letter"
	s.adopt, s.coverage, s.pin = s.schema+".walpost_adopt", s.schema+".walpost_coverage", s.schema+".pin"
	pgtest.Exec(t, url, "CREATE SCHEMA "+s.schema, "CREATE ROLE "+s.attacker+" LOGIN")
	if open {
		pgtest.Exec(t, url, "GRANT USAGE, CREATE ON SCHEMA "+s.schema+" TO PUBLIC")
	}
	t.Cleanup(func() {
		pgtest.Exec(t, url, "DROP SCHEMA "+s.schema+" CASCADE", "DROP OWNED BY "+s.attacker, "DROP ROLE "+s.attacker)
	})
	s.config(t)
	return s
}

// newSquatInPublic is a squat whose state tables are in the public schema
// of the database at url, with its default privileges untouched.
func newSquatInPublic(t *testing.T, url string) *squat {
	t.Helper()
	name := pgtest.Name(t, "sq")
	s := &squat{url: url, ob: relaytest.NewOutbox(t, url), schema: "public", attacker: pgtest.Name(t, "mallory")}
	s.attackerURL = strings.Replace(url, "postgres@", s.attacker+"@", 1)
	s.progress, s.deadLetter = "public."+name+"_progress", "public."+name+"_dead_letter"
	s.adopt, s.coverage, s.pin = "public."+name+"_adopt", "public."+name+"_coverage", "public."+name+"_pin"
	pgtest.Exec(t, url, "CREATE ROLE "+s.attacker+" LOGIN")
	t.Cleanup(func() {
		// The squatter's tables and views first, then cdc init's.
		pgtest.Exec(t, url, "DROP OWNED BY "+s.attacker, "DROP TABLE IF EXISTS "+strings.Join([]string{s.progress, s.deadLetter, s.adopt, s.coverage}, ", ")+" CASCADE",
			"DROP FUNCTION IF EXISTS "+s.pin+"()", "DROP ROLE "+s.attacker)
	})
	s.config(t)
	return s
}

// config writes the squat's cdc.yaml: a file sink, the state tables in
// the squat's schema.
func (s *squat) config(t *testing.T) {
	t.Helper()
	s.out = filepath.Join(t.TempDir(), "out.jsonl")
	s.cfg = s.ob.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s}", s.out), "")
	addPostgres(t, s.cfg, "progress_table: "+s.progress, "dead_letter_table: "+s.deadLetter,
		"adopt_table: "+s.adopt, "coverage_table: "+s.coverage)
}

// asAttacker runs sqls as the LOGIN-only role.
func (s *squat) asAttacker(t *testing.T, sqls ...string) {
	t.Helper()
	pgtest.Exec(t, s.attackerURL, sqls...)
}

// created lists which of tables exist, and the slot and the publication
// when they do.
func (s *squat) created(t *testing.T, tables ...string) []string {
	t.Helper()
	conn := pgtest.Connect(t, s.url)
	var made []string
	for _, table := range tables {
		var ok bool
		if err := conn.QueryRow(context.Background(), "SELECT to_regclass($1) IS NOT NULL", table).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		if ok {
			made = append(made, "table "+table)
		}
	}
	var pubs, slots int
	if err := conn.QueryRow(context.Background(), "SELECT (SELECT count(*) FROM pg_publication WHERE pubname = $1), (SELECT count(*) FROM pg_replication_slots WHERE slot_name = $2)",
		s.ob.Publication, s.ob.Slot).Scan(&pubs, &slots); err != nil {
		t.Fatal(err)
	}
	if pubs > 0 {
		made = append(made, "publication "+s.ob.Publication)
	}
	if slots > 0 {
		made = append(made, "slot "+s.ob.Slot)
	}
	return made
}

// refusal checks that a cdc init or run refused table, owned by owner,
// exiting 1 with more (the fixes) in its output.
func refusal(t *testing.T, what string, code int, output, table, owner string, more ...string) {
	t.Helper()
	if code != 1 {
		t.Fatalf("%s: exit %d, want 1 (refusing %s, owned by %s)\n%s", what, code, table, owner, output)
	}
	for _, want := range append([]string{table, "owned by " + owner}, more...) {
		if !strings.Contains(output, want) {
			t.Fatalf("%s: exit 1, but the output does not say %q:\n%s", what, want, output)
		}
	}
}

// attackerAdoptDDL is the adopt table's layout, as a squatter makes it.
func attackerAdoptDDL(table string) string {
	return "CREATE TABLE " + table + " (slot text NOT NULL, xid xid8 NOT NULL, created_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (slot, xid))"
}

// TestIntegrationSquatAdoptTableIsRefusedByInit: where PUBLIC may CREATE
// in the state tables' schema, a role that can only log in makes the
// adopt table before cdc init, seeded with the transaction ids to come
// (each would make its adopt messages outbox rows). cdc init exits 1
// naming the table, its owner and the fixes, before it creates anything:
// no publication, no slot, no other state table. A view squatting a state
// table's name is refused alike.
func TestIntegrationSquatAdoptTableIsRefusedByInit(t *testing.T) {
	t.Parallel()
	squatAdoptTableIsRefusedByInit(t, newSquat(t, true))
}

// squatAdoptTableIsRefusedByInit is
// TestIntegrationSquatAdoptTableIsRefusedByInit on squat s (also
// TestIntegrationVersions).
func squatAdoptTableIsRefusedByInit(t *testing.T, s *squat) {
	s.asAttacker(t, attackerAdoptDDL(s.adopt),
		fmt.Sprintf("INSERT INTO %s (slot, xid) SELECT '%s', (pg_current_xact_id()::text::bigint + g)::text::xid8 FROM generate_series(1, 100000) g", s.adopt, s.ob.Slot),
		"GRANT SELECT ON "+s.adopt+" TO PUBLIC")
	code, stdout, stderr := cdc(t, nil, "init", "--config", s.cfg)
	refusal(t, "cdc init on the squatted adopt table", code, stdout+stderr, s.adopt, s.attacker,
		"ALTER TABLE "+s.adopt+" OWNER TO postgres", "DROP TABLE "+s.adopt, "postgres.trusted_owners")
	if made := s.created(t, s.progress, s.deadLetter, s.coverage); len(made) > 0 {
		t.Fatalf("cdc init refused, yet created %v:\n%s%s", made, stdout, stderr)
	}

	s.asAttacker(t, "DROP TABLE "+s.adopt, "CREATE VIEW "+s.coverage+" AS SELECT 'x'::text AS slot")
	code, stdout, stderr = cdc(t, nil, "init", "--config", s.cfg)
	refusal(t, "cdc init on a view named as the coverage table", code, stdout+stderr, s.coverage, s.attacker, "is a view")
	if made := s.created(t, s.progress, s.deadLetter, s.adopt); len(made) > 0 {
		t.Fatalf("cdc init refused, yet created %v:\n%s%s", made, stdout, stderr)
	}
}

// TestIntegrationSquatProgressTriggerIsRefusedByInitAndRun: a progress
// table made beforehand by a LOGIN-only role, with a trigger that pins
// every sink's position far ahead (the relay would skip rows and confirm
// the slot past them), is refused by cdc init. Once cdc init made the
// tables itself, cdc run exits 1 before streaming (nothing delivered)
// when a trigger whose function an untrusted role owns was added to the
// progress table (a TRIGGER grant given by mistake), and when the table
// was given to that role (ALTER TABLE … OWNER TO by mistake).
func TestIntegrationSquatProgressTriggerIsRefusedByInitAndRun(t *testing.T) {
	t.Parallel()
	squatProgressTriggerIsRefused(t, newSquat(t, true))
}

// squatProgressTriggerIsRefused is
// TestIntegrationSquatProgressTriggerIsRefusedByInitAndRun on squat s
// (also TestIntegrationVersions).
func squatProgressTriggerIsRefused(t *testing.T, s *squat) {
	pin := s.pin
	pinSQL := []string{
		"CREATE FUNCTION " + pin + "() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN NEW.commit_lsn := 'FFFFFFF/0'; NEW.lsn := 'FFFFFFF/0'; RETURN NEW; END$$",
		"CREATE TRIGGER pin BEFORE INSERT OR UPDATE ON " + s.progress + " FOR EACH ROW EXECUTE FUNCTION " + pin + "()",
	}
	s.asAttacker(t, append([]string{`CREATE TABLE ` + s.progress + ` (slot text NOT NULL, sink text NOT NULL, commit_lsn pg_lsn NOT NULL,
		lsn pg_lsn NOT NULL, seq bigint NOT NULL DEFAULT 0, commit_time timestamptz, updated_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (slot, sink))`},
		append(pinSQL, "GRANT ALL ON "+s.progress+" TO PUBLIC")...)...)
	code, stdout, stderr := cdc(t, nil, "init", "--config", s.cfg)
	refusal(t, "cdc init on the squatted progress table", code, stdout+stderr, s.progress, s.attacker, "postgres.trusted_owners")

	s.asAttacker(t, "DROP TABLE "+s.progress, "DROP FUNCTION "+pin+"()")
	cdcInit(t, s.cfg)
	conn := pgtest.Connect(t, s.url)
	s.ob.InsertTx(t, conn, relaytest.NewMsg("t", "k", 1))

	pgtest.Exec(t, s.url, "GRANT TRIGGER ON "+s.progress+" TO "+s.attacker)
	s.asAttacker(t, pinSQL...)
	p := startCDC(t, "run", "--config", s.cfg)
	code = p.Wait(60 * time.Second)
	refusal(t, "cdc run with an untrusted trigger on the progress table", code, p.Stderr.String(), s.progress, s.attacker, "trigger pin", pin+"()", "postgres.trusted_owners")
	if n := relaytest.CountLines(s.out); n != 0 || strings.Contains(p.Stderr.String(), `"streaming"`) {
		t.Fatalf("cdc run refused, yet streamed (%d line(s) delivered):\n%s", n, p.Stderr.String())
	}

	pgtest.Exec(t, s.url, "DROP TRIGGER pin ON "+s.progress, "ALTER TABLE "+s.progress+" OWNER TO "+s.attacker)
	p = startCDC(t, "run", "--config", s.cfg)
	code = p.Wait(60 * time.Second)
	refusal(t, "cdc run on a progress table given to an untrusted role", code, p.Stderr.String(), s.progress, s.attacker, "ALTER TABLE "+s.progress+" OWNER TO postgres")
	if n := relaytest.CountLines(s.out); n != 0 {
		t.Fatalf("cdc run refused, yet delivered %d line(s):\n%s", n, p.Stderr.String())
	}
}

// TestIntegrationSquatFixesAreTaken: each fix the refusal names works.
// The squatted adopt table given to a trusted role (ALTER TABLE … OWNER
// TO postgres) is used by cdc init; a dead-letter table dropped is made
// again by it; and a table owned by a role of the operator's (ops, not a
// superuser, not the relay's role) is refused by cdc run as a relay role
// with the grants of sql/roles.sql until postgres.trusted_owners names
// ops: then cdc init and cdc run take it, and the relay delivers.
func TestIntegrationSquatFixesAreTaken(t *testing.T) {
	t.Parallel()
	s := newSquat(t, true)
	s.asAttacker(t, attackerAdoptDDL(s.adopt), "CREATE TABLE "+s.deadLetter+" (slot text)")
	code, stdout, stderr := cdc(t, nil, "init", "--config", s.cfg)
	refusal(t, "cdc init on squatted tables", code, stdout+stderr, s.adopt, s.attacker)
	pgtest.Exec(t, s.url, "ALTER TABLE "+s.adopt+" OWNER TO postgres", "DROP TABLE "+s.deadLetter)
	code, stdout, stderr = cdc(t, nil, "init", "--config", s.cfg)
	if code != 0 || !strings.Contains(stdout, "table "+s.adopt+": exists") || !strings.Contains(stdout, "table "+s.deadLetter+": created") {
		t.Fatalf("cdc init after ALTER TABLE … OWNER TO and DROP TABLE: exit %d, want 0, the adopt table used and the dead-letter table made\n%s%s", code, stdout, stderr)
	}

	ops, relayRole := pgtest.Name(t, "ops"), pgtest.Name(t, "relay")
	pgtest.Exec(t, s.url, "CREATE ROLE "+ops+" LOGIN", "CREATE ROLE "+relayRole+" LOGIN REPLICATION",
		"ALTER TABLE "+s.progress+" OWNER TO "+ops,
		"GRANT SELECT ON "+s.ob.Table+" TO "+relayRole,
		"GRANT SELECT, INSERT, UPDATE ON "+s.progress+", "+s.coverage+" TO "+relayRole,
		"GRANT SELECT ON "+s.adopt+" TO "+relayRole,
		"GRANT SELECT, INSERT ON "+s.deadLetter+" TO "+relayRole)
	t.Cleanup(func() {
		pgtest.Exec(t, s.url, "DROP OWNED BY "+relayRole, "DROP ROLE "+relayRole, "DROP TABLE IF EXISTS "+s.progress, "DROP OWNED BY "+ops, "DROP ROLE "+ops)
	})
	relayOB := s.ob
	relayOB.URL = strings.Replace(s.url, "postgres@", relayRole+"@", 1)
	relayCfg := relayOB.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s}", s.out), "")
	postgres := []string{"progress_table: " + s.progress, "dead_letter_table: " + s.deadLetter, "adopt_table: " + s.adopt, "coverage_table: " + s.coverage}
	addPostgres(t, relayCfg, postgres...)
	p := startCDC(t, "run", "--config", relayCfg)
	code = p.Wait(60 * time.Second)
	refusal(t, "cdc run as the relay role, the progress table owned by ops", code, p.Stderr.String(), s.progress, ops, "postgres.trusted_owners")

	addPostgres(t, s.cfg, "trusted_owners: ["+ops+"]")
	addPostgres(t, relayCfg, "trusted_owners: ["+ops+"]")
	if code, stdout, stderr := cdc(t, nil, "init", "--config", s.cfg); code != 0 || !strings.Contains(stdout, "table "+s.progress+": exists") {
		t.Fatalf("cdc init with postgres.trusted_owners: [%s]: exit %d, want 0\n%s%s", ops, code, stdout, stderr)
	}
	p = startCDC(t, "run", "--config", relayCfg)
	m := relaytest.NewMsg("t", "k", 1)
	s.ob.InsertTx(t, pgtest.Connect(t, s.url), m)
	relaytest.WaitAllDelivered(t, s.out, []relaytest.Msg{m}, 60*time.Second, p.Stderr.String)
	p.Stop(t)
}

// TestIntegrationSquatWarnsWhenPublicMayCreateInTheStateSchema: cdc init
// and cdc run warn, in one line naming the schema and the fix, when
// PUBLIC may CREATE in the schema of a state table, and say nothing of
// it otherwise.
func TestIntegrationSquatWarnsWhenPublicMayCreateInTheStateSchema(t *testing.T) {
	t.Parallel()
	for _, open := range []bool{true, false} {
		squatWarns(t, newSquat(t, open), open)
	}
}

// squatWarns checks that cdc init and cdc run warn that PUBLIC may CREATE
// in the schema of squat s's state tables when open, and say nothing of it
// otherwise (also TestIntegrationVersions).
func squatWarns(t *testing.T, s *squat, open bool) {
	t.Helper()
	warning := "PUBLIC may CREATE in schema " + s.schema
	code, stdout, stderr := cdc(t, nil, "init", "--config", s.cfg)
	if code != 0 || strings.Contains(stdout+stderr, warning) != open || open && !strings.Contains(stdout+stderr, "REVOKE CREATE ON SCHEMA "+s.schema+" FROM PUBLIC") {
		t.Fatalf("cdc init, PUBLIC may CREATE: %v: exit %d, want 0 and the warning %v\n%s%s", open, code, open, stdout, stderr)
	}
	p := startCDC(t, "run", "--config", s.cfg)
	pgtest.Await(t, 60*time.Second, "cdc run streaming", func() bool { return strings.Contains(p.Stderr.String(), `"streaming"`) })
	p.Stop(t)
	if got := strings.Count(p.Stderr.String(), warning); open && got != 1 || !open && got != 0 {
		t.Fatalf("cdc run, PUBLIC may CREATE: %v: the warning logged %d time(s)\n%s", open, got, p.Stderr.String())
	}
}

// TestIntegrationSquatOutboxInAnOpenSchemaIsRefused: where PUBLIC may
// CREATE (PostgreSQL 14's public schema), a role that can only log in
// makes the outbox table before the application's migrations do, and a
// progress table beside it whose trigger pins every sink's position far
// ahead. Before, cdc init (as a superuser) took the outbox, and trusted
// the progress table because the outbox's owner owned it. Now cdc init
// exits 1 naming the outbox, its owner and postgres.trusted_owners,
// before it creates a publication or a slot. An outbox in such a schema
// owned by the application's role is refused alike until
// postgres.trusted_owners names that role; then init and run take it and
// the relay delivers.
func TestIntegrationSquatOutboxInAnOpenSchemaIsRefused(t *testing.T) {
	t.Parallel()
	squatOutboxIsRefused(t, newSquat(t, true))
}

// squatOutboxIsRefused is TestIntegrationSquatOutboxInAnOpenSchemaIsRefused
// in s's schema, which PUBLIC may CREATE in (one opened, or PostgreSQL
// 14's public).
func squatOutboxIsRefused(t *testing.T, s *squat) {
	squatted := s.ob
	squatted.Table = s.schema + "." + pgtest.Name(t, "sq_outbox")
	squatted.Publication, squatted.Slot = s.ob.Publication+"_sq", s.ob.Slot+"_sq"
	cfg := squatted.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s}", s.out), "")
	addPostgres(t, cfg, "progress_table: "+s.progress, "dead_letter_table: "+s.deadLetter, "adopt_table: "+s.adopt, "coverage_table: "+s.coverage)
	pin := s.pin
	s.asAttacker(t, outbox.DDL(squatted.Table), "GRANT ALL ON "+squatted.Table+" TO PUBLIC",
		`CREATE TABLE `+s.progress+` (slot text NOT NULL, sink text NOT NULL, commit_lsn pg_lsn NOT NULL,
		lsn pg_lsn NOT NULL, seq bigint NOT NULL DEFAULT 0, commit_time timestamptz, updated_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (slot, sink))`,
		"CREATE FUNCTION "+pin+"() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN NEW.commit_lsn := 'FFFFFFF/0'; NEW.lsn := 'FFFFFFF/0'; RETURN NEW; END$$",
		"CREATE TRIGGER pin BEFORE INSERT OR UPDATE ON "+s.progress+" FOR EACH ROW EXECUTE FUNCTION "+pin+"()",
		"GRANT ALL ON "+s.progress+" TO PUBLIC")
	t.Cleanup(func() {
		pgtest.Exec(t, s.url, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = '"+squatted.Slot+"'",
			"DROP PUBLICATION IF EXISTS "+squatted.Publication)
	})
	code, stdout, stderr := cdc(t, nil, "init", "--config", cfg)
	refusal(t, "cdc init on an outbox a LOGIN-only role made", code, stdout+stderr, squatted.Table, s.attacker,
		"where PUBLIC may CREATE", "postgres.trusted_owners", "REVOKE CREATE ON SCHEMA "+s.schema+" FROM PUBLIC")
	if !strings.Contains(stdout+stderr, s.progress) {
		t.Errorf("cdc init does not name the progress table, whose owner it no longer trusts:\n%s%s", stdout, stderr)
	}
	var pubs, slots int
	if err := pgtest.Connect(t, s.url).QueryRow(context.Background(), "SELECT (SELECT count(*) FROM pg_publication WHERE pubname = $1), (SELECT count(*) FROM pg_replication_slots WHERE slot_name = $2)",
		squatted.Publication, squatted.Slot).Scan(&pubs, &slots); err != nil || pubs+slots != 0 {
		t.Fatalf("cdc init refused, yet created %d publication(s) and %d slot(s) (%v)", pubs, slots, err)
	}

	// The application's own role owns the outbox: refused until trusted.
	app := pgtest.Name(t, "app")
	pgtest.Exec(t, s.url, "DROP TABLE "+squatted.Table+", "+s.progress+" CASCADE", "DROP FUNCTION "+pin+"()",
		"CREATE ROLE "+app+" LOGIN", outbox.DDL(squatted.Table), "ALTER TABLE "+squatted.Table+" OWNER TO "+app)
	t.Cleanup(func() {
		pgtest.Exec(t, s.url, "DROP TABLE IF EXISTS "+squatted.Table, "DROP OWNED BY "+app, "DROP ROLE "+app)
	})
	code, stdout, stderr = cdc(t, nil, "init", "--config", cfg)
	refusal(t, "cdc init on an outbox of the application's role in an open schema", code, stdout+stderr, squatted.Table, app, "postgres.trusted_owners")
	addPostgres(t, cfg, "trusted_owners: ["+app+"]")
	cdcInit(t, cfg)
	p := startCDC(t, "run", "--config", cfg)
	m := relaytest.NewMsg("t", "k", 1)
	squatted.InsertTx(t, pgtest.Connect(t, s.url), m)
	relaytest.WaitAllDelivered(t, s.out, []relaytest.Msg{m}, 60*time.Second, p.Stderr.String)
	p.Stop(t)
}

// TestIntegrationSquatDeadLetterTableIsRefusedByEveryCommand: the
// commands that read the state tables to decide what they publish, park
// or skip check who owns them first, as cdc init and cdc run do. After
// cdc init, the dead-letter table is given to a LOGIN-only role (an ALTER
// TABLE … OWNER TO by mistake), which parks a message of its own making.
// Before, cdc dead-letter resend --all published it (exit 0). Now cdc
// dead-letter (list, resend), cdc replay, cdc skip, cdc resync and cdc
// recover each exit 1 naming the table and its owner, and nothing is
// published.
func TestIntegrationSquatDeadLetterTableIsRefusedByEveryCommand(t *testing.T) {
	t.Parallel()
	s := newSquat(t, false)
	cdcInit(t, s.cfg)
	forged := relaytest.NewMsg("payment.refund", "acct-1", 1)
	row := fmt.Sprintf(`{"id":%q,"type":%q,"key":%q,"payload":{"amount":1000000},"headers":{},"lsn":"0/1","commit_lsn":"0/1"}`, forged.ID, forged.Type, forged.Key)
	pgtest.Exec(t, s.url, "GRANT USAGE ON SCHEMA "+s.schema+" TO "+s.attacker, "ALTER TABLE "+s.deadLetter+" OWNER TO "+s.attacker)
	s.asAttacker(t, fmt.Sprintf("INSERT INTO %s (slot, lsn, seq, sink, commit_lsn, message_id, error, row_data) VALUES ('%s', '0/1', 0, 'out', '0/1', '%s', 'refused', '%s')",
		s.deadLetter, s.ob.Slot, forged.ID, row))
	for _, args := range [][]string{
		{"dead-letter", "--config", s.cfg, "resend", "--all"},
		{"dead-letter", "--config", s.cfg, "list"},
		{"replay", "--config", s.cfg, "--since", "1h"},
		{"skip", "--config", s.cfg, "--lsn", "0/1"},
		{"resync", "--config", s.cfg},
		{"recover", "--config", s.cfg},
	} {
		code, stdout, stderr := cdc(t, nil, args...)
		refusal(t, "cdc "+strings.Join(args, " "), code, stdout+stderr, s.deadLetter, s.attacker, "ALTER TABLE "+s.deadLetter+" OWNER TO postgres")
	}
	if n := relaytest.CountLines(s.out); n != 0 {
		t.Fatalf("the refused commands published %d message(s)", n)
	}
}
