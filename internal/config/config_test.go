package config

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walpost/walpost/internal/layout"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

const minimal = `
postgres:
  url: postgres://u@h/db
sinks:
  - {name: out, kind: stdout}
`

func TestDefaultsMatchTheDesign(t *testing.T) {
	c, err := Parse([]byte(minimal), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.Postgres.Table != "public.outbox" || c.Postgres.Slot != "walpost_outbox" || c.Postgres.Publication != "walpost_outbox" {
		t.Fatalf("postgres defaults: %+v", c.Postgres)
	}
	if c.Columns != (Columns{"id", "type", "key", "payload", "headers", "", "", "", "", ""}) {
		t.Fatalf("columns defaults: %+v", c.Columns)
	}
	if c.Postgres.StatusInterval.D() != 10*time.Second || c.Postgres.HeartbeatInterval.D() != 10*time.Second {
		t.Fatalf("interval defaults: %+v", c.Postgres)
	}
	if c.Relay.OnInvalid != "stop" || c.Relay.OnRefused != "stop" || c.Relay.RefusedAttempts != 3 {
		t.Fatalf("bad-input defaults: %+v", c.Relay)
	}
	if c.Relay.WindowMessages != 10000 || c.Log.Level != "info" || c.Log.Format != "json" {
		t.Fatalf("relay/log defaults: %+v %+v", c.Relay, c.Log)
	}
}

func TestExpandsVariablesAndEnvOverrides(t *testing.T) {
	y := `
postgres:
  url: postgres://app:${PGPASS}@h/db
  slot: ${SLOT:-fallback}
sinks: [{name: out, kind: stdout}]
`
	c, err := Parse([]byte(y), env(map[string]string{"PGPASS": "p$w", "CDC_POSTGRES_TABLE": "app.events"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Postgres.URL != "postgres://app:p$w@h/db" || c.Postgres.Slot != "fallback" || c.Postgres.Table != "app.events" {
		t.Fatalf("got %+v", c.Postgres)
	}
	c, err = Parse([]byte(y), env(map[string]string{"PGPASS": "x", "CDC_POSTGRES_URL": "postgres://other/db"}))
	if err != nil || c.Postgres.URL != "postgres://other/db" {
		t.Fatalf("CDC_POSTGRES_URL did not override: %v %+v", err, c)
	}
}

func TestErrorsNameTheField(t *testing.T) {
	cases := []struct{ yaml, want string }{
		{"postgres: {url: 'postgres://x', tabel: t}\nsinks: [{name: a, kind: stdout}]", `unknown key "tabel"`},
		{"postgres: {}\nsinks: [{name: a, kind: stdout}]", "postgres.url: empty"},
		{"postgres: {url: 'postgres://x', slot: My-Slot}\nsinks: [{name: a, kind: stdout}]", "postgres.slot"},
		{"postgres: {url: 'postgres://x', table: outbox.a.b}\nsinks: [{name: a, kind: stdout}]", "postgres.table"},
		{"postgres: {url: 'postgres://x', status_interval: soon}\nsinks: [{name: a, kind: stdout}]", `"soon" is not a duration`},
		{"postgres: {url: 'postgres://x'}\nsinks: []", "sinks: none configured"},
		{"postgres: {url: 'postgres://x'}\nsinks: [{kind: stdout}]", "sinks[0].name: empty"},
		{"postgres: {url: 'postgres://x'}\nsinks: [{name: a}]", "sinks[0].kind: empty"},
		{"postgres: {url: 'postgres://x'}\nsinks: [{name: a, kind: stdout, route: {include: ['[']}}]", "sinks[0].route"},
		{"postgres: {url: 'postgres://x'}\ncolumns: {id: id, type: id}\nsinks: [{name: a, kind: stdout}]", "columns.type"},
		{"postgres: {url: 'postgres://x'}\nrelay: {batch_size: -1}\nsinks: [{name: a, kind: stdout}]", "relay.batch_size"},
		{"postgres: {url: 'postgres://x'}\nlog: {level: loud}\nsinks: [{name: a, kind: stdout}]", "log.level"},
		{"postgres: {url: 'postgres://x'}\nrelay: {on_refused: skip}\nsinks: [{name: a, kind: stdout}]", `relay.on_refused: "skip" is not stop, dead_letter or hold_key`},
		{"postgres: {url: 'postgres://x'}\nrelay: {refused_attempts: 1000}\nsinks: [{name: a, kind: stdout}]", "relay.refused_attempts: 1000 is outside 1..100"},
		{"postgres: {url: '${MISSING}'}\nsinks: [{name: a, kind: stdout}]", "MISSING is not set"},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.yaml), env(nil))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: err = %v, want it to contain %q", c.yaml, err, c.want)
		}
	}
}

func TestSinkDecodeIsStrictAndSkipsCommonKeys(t *testing.T) {
	y := minimal + `  - name: f
    kind: file
    route: {include: ["order.*"]}
    path: /tmp/x
    fsycn: true
`
	c, err := Parse([]byte(y), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	var fc struct {
		Path  string `yaml:"path"`
		Fsync bool   `yaml:"fsync"`
	}
	err = c.Sinks[1].Decode(&fc)
	if err == nil || !strings.Contains(err.Error(), `unknown key "fsycn"`) {
		t.Fatalf("err = %v, want unknown key fsycn", err)
	}
}

func TestRouteMatchesGlobs(t *testing.T) {
	r := Route{Include: []string{"order.*", "invoice.paid"}, Exclude: []string{"order.internal*"}}
	for typ, want := range map[string]bool{"order.created": true, "invoice.paid": true, "invoice.sent": false, "order.internal.audit": false} {
		if got := r.Matches(typ); got != want {
			t.Errorf("Matches(%q) = %v, want %v", typ, got, want)
		}
	}
	if !(Route{}).Matches("anything") {
		t.Error("an empty route must match every type")
	}
}

// TestAnyIdentifierIsAccepted: names are taken as they appear in the
// catalog (EF Core's PascalCase tables and columns), quoted where they
// hold a dot, and only slots keep PostgreSQL's lower-case rule.
func TestAnyIdentifierIsAccepted(t *testing.T) {
	y := `postgres:
  url: postgres://x
  table: public."Outbox.Messages"
  publication: "Walpost Pub; --"
  progress_table: Walpost.Progress
columns: {id: Id, type: Type, key: "-", payload: Payload, headers: "-", time: CreatedOnUtc, sent_at: ProcessedOnUtc}
sinks: [{name: out, kind: stdout}]
`
	c, err := Parse([]byte(y), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	ob := c.Outbox()
	if ob.Schema != "public" || ob.Name != "Outbox.Messages" || ob.Qualified() != `"public"."Outbox.Messages"` {
		t.Fatalf("outbox = %+v (%s)", ob, ob.Qualified())
	}
	if ob.Columns != (layout.Columns{"Id", "Type", "", "Payload", "", "CreatedOnUtc", "ProcessedOnUtc"}) {
		t.Fatalf("columns = %q", ob.Columns)
	}
	if c.Postgres.Publication != "Walpost Pub; --" {
		t.Fatalf("publication = %q", c.Postgres.Publication)
	}
	_, err = Parse([]byte(strings.Replace(y, `public."Outbox.Messages"`, `public."Outbox`, 1)), env(nil))
	if err == nil || err.Error() != `postgres.table: "public.\"Outbox" has an unterminated quote (line 3)` {
		t.Fatalf("err = %v", err)
	}
	_, err = Parse([]byte(strings.Replace(y, `public."Outbox.Messages"`, `a.b.c`, 1)), env(nil))
	if err == nil || !strings.Contains(err.Error(), `postgres.table: "a.b.c" is not schema.table`) {
		t.Fatalf("err = %v", err)
	}
}

// TestADONETURLIsConvertedAndSlashInPasswordRefused: postgres.url in the
// ADO.NET form (Npgsql's keys) is converted to libpq's keyword/value form,
// so that it connects where it says and is never sent as a startup
// parameter; one that cannot be converted, and a URL whose password holds
// an unescaped '/', are refused naming postgres.url, without a piece of
// the password.
func TestADONETURLIsConvertedAndSlashInPasswordRefused(t *testing.T) {
	c, err := Parse([]byte("postgres:\n  url: 'Host=db.example.com;Port=5433;Database=app;User ID=walpost;Password=s3cret;SSL Mode=Require'\nsinks: [{name: a, kind: stdout}]"), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	pc, err := pgconn.ParseConfig(c.Postgres.URL)
	if err != nil || pc.Host != "db.example.com" || pc.Port != 5433 || pc.Database != "app" || pc.User != "walpost" || pc.Password != "s3cret" || len(pc.RuntimeParams) != 0 {
		t.Fatalf("converted to a URL that parses as %+v, %v", pc, err)
	}
	if !slices.Contains(c.Secrets(), "s3cret") {
		t.Errorf("Secrets() = %d values, without the password", len(c.Secrets()))
	}
	for _, cs := range []struct{ url, want string }{
		{"Host=h;Password=s3cretpw;Frobnicate=1", `postgres.url: it is a .NET (ADO.NET) connection string, and its key "Frobnicate" has no libpq equivalent`},
		{"postgres://walpost:1234/s3cretpw@db.example.com/app", "postgres.url: an '@' follows a '/'"},
		{"postgres://walpost:s3cr/etpw@db.example.com:5432/app", "%2F"},
	} {
		_, err := Parse([]byte("postgres:\n  url: '"+cs.url+"'\nsinks: [{name: a, kind: stdout}]"), env(nil))
		if err == nil || !strings.Contains(err.Error(), cs.want) || strings.Contains(err.Error(), "s3cr") || strings.Contains(err.Error(), "etpw") {
			t.Errorf("%q: %v, want an error saying %q without the password", cs.url, err, cs.want)
		}
	}
}

// TestIsSetTellsGivenFromDefaulted: IsSet is true for a setting of the
// file or of a CDC_* variable, false for a defaulted one.
func TestIsSetTellsGivenFromDefaulted(t *testing.T) {
	c, err := Parse([]byte(minimal+"log: {format: json}\n"), env(nil))
	if err != nil || !c.IsSet("log.format") || c.IsSet("log.level") {
		t.Errorf("log.format in the file: IsSet %v, log.level IsSet %v (%v)", c != nil && c.IsSet("log.format"), c != nil && c.IsSet("log.level"), err)
	}
	c, err = Parse([]byte(minimal), env(map[string]string{"CDC_LOG_FORMAT": "json"}))
	if err != nil || !c.IsSet("log.format") {
		t.Errorf("CDC_LOG_FORMAT: IsSet false (%v)", err)
	}
	c, err = Parse([]byte(minimal), env(nil))
	if err != nil || c.IsSet("log.format") || c.Log.Format != "json" {
		t.Errorf("no log.format: IsSet true or format %q (%v)", c.Log.Format, err)
	}
}

// TestColumnsOrderIsOptionalValidatedAndTakesTheDefaultTablesSeq: unset,
// the default layout orders by sql/outbox.sql's seq when the table has it
// (layout.Table.OrderIfPresent) and another layout by nothing; "-" turns
// it off; a name is taken as written; errors name columns.order.
func TestColumnsOrderIsOptionalValidatedAndTakesTheDefaultTablesSeq(t *testing.T) {
	parse := func(columns string) (*Config, error) {
		return Parse([]byte("postgres: {url: 'postgres://x'}\ncolumns: "+columns+"\nsinks: [{name: a, kind: stdout}]"), env(nil))
	}
	for _, c := range []struct {
		columns   string
		order     string
		ifPresent bool
	}{
		{"{}", layout.DefaultOrder, true},
		{"{time: created_at}", layout.DefaultOrder, true},
		{"{order: '-'}", "", false},
		{"{order: Ord}", "Ord", false},
		{"{order: created_at, time: created_at}", "created_at", false},
		{"{id: Id}", "", false},
		{"{id: Id, order: id}", "id", false},
	} {
		cfg, err := parse(c.columns)
		if err != nil {
			t.Fatalf("columns: %s: %v", c.columns, err)
		}
		if ob := cfg.Outbox(); ob.Order != c.order || ob.OrderIfPresent != c.ifPresent {
			t.Errorf("columns: %s: order %q (if present %v), want %q (%v)", c.columns, ob.Order, ob.OrderIfPresent, c.order, c.ifPresent)
		}
	}
	for _, bad := range []string{"{order: payload}", "{order: key}", "{order: " + strings.Repeat("o", 64) + "}", "{sent_at: s, order: s}"} {
		if _, err := parse(bad); err == nil || !strings.Contains(err.Error(), "columns.order") {
			t.Errorf("columns: %s: err = %v, want one naming columns.order", bad, err)
		}
	}
}
