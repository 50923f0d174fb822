package store

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/walpost/walpost/internal/config"
)

func parseConfig(t *testing.T, postgres string) *config.Config {
	t.Helper()
	y := "postgres:\n  url: postgres://u@h/db\n  slot: s1\n" + postgres + "sinks: [{name: out, kind: stdout}]\n"
	cfg, err := config.Parse([]byte(y), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("config:\n%s\n%v", y, err)
	}
	return cfg
}

// TestTablesAreQuotedOnlyWherePostgreSQLNeedsIt: every state table name
// goes into SQL text as written in the config, schema-qualified, each
// part bare when PostgreSQL reads it back unchanged and quoted (with
// inner quotes doubled) when it holds capitals, a dot, a quote, a space
// or a reserved word; the names as configured stay for messages.
func TestTablesAreQuotedOnlyWherePostgreSQLNeedsIt(t *testing.T) {
	for _, c := range []struct {
		name, want string
	}{
		{"public.walpost_sink_progress", "public.walpost_sink_progress"},
		{"walpost_progress", "walpost_progress"},
		{"ops.Progress", `ops."Progress"`},
		{"Ops.progress", `"Ops".progress`},
		{"public.user", `public."user"`},     // a reserved word
		{"public.select", `public."select"`}, // another
		{"public.users", "public.users"},     // not one
		{`"my.schema"."t.1"`, `"my.schema"."t.1"`},
		{`public."a""b"`, `public."a""b"`},
		{"public.a b", `public."a b"`},
		{"public.1st", `public."1st"`},
		{"public.t$1", `public."t$1"`},
		{"public.ta;DROP TABLE x", `public."ta;DROP TABLE x"`},
		{"public.é", `public."é"`},
		{"-", ""},
		{"", ""},
	} {
		if got := QuoteTable(c.name); got != c.want {
			t.Errorf("QuoteTable(%q) = %s, want %s", c.name, got, c.want)
		}
	}
}

// TestTablesOfTheConfig: the defaults, names of the operator's own, "-"
// turning per-sink progress off, and a table-less outbox, which has no
// rows to adopt and keeps coverage in memory.
func TestTablesOfTheConfig(t *testing.T) {
	got := TablesOf(parseConfig(t, ""))
	want := Tables{Slot: "s1",
		Progress: "public.walpost_sink_progress", ProgressName: "public.walpost_sink_progress",
		DeadLetter: "public.walpost_dead_letter", DeadLetterName: "public.walpost_dead_letter",
		Adopt: "public.walpost_adopt", AdoptName: "public.walpost_adopt",
		Coverage: "public.walpost_coverage"}
	if got != want {
		t.Errorf("defaults:\n got %+v\nwant %+v", got, want)
	}

	got = TablesOf(parseConfig(t, `  progress_table: Ops.Progress
  dead_letter_table: 'ops."dead.letters"'
  adopt_table: ops.adopt
  coverage_table: ops."Coverage"
`))
	want = Tables{Slot: "s1",
		Progress: `"Ops"."Progress"`, ProgressName: "Ops.Progress",
		DeadLetter: `ops."dead.letters"`, DeadLetterName: `ops."dead.letters"`,
		Adopt: "ops.adopt", AdoptName: "ops.adopt",
		Coverage: `ops."Coverage"`}
	if got != want {
		t.Errorf("own names:\n got %+v\nwant %+v", got, want)
	}

	got = TablesOf(parseConfig(t, "  progress_table: '-'\n  coverage_table: '-'\n"))
	if got.Progress != "" || got.ProgressName != "-" || got.Coverage != "" || got.DeadLetter == "" || got.Adopt == "" {
		t.Errorf(`progress_table and coverage_table "-": %+v`, got)
	}

	got = TablesOf(parseConfig(t, "  source: messages\n"))
	if got.Adopt != "" || got.Coverage != "" || got.Progress == "" || got.DeadLetter == "" {
		t.Errorf("table-less outbox: %+v", got)
	}
}

// TestStateTableDDLNamesTheQuotedTable: the CREATE TABLE statements take
// the quoted name as the one and only table (no format verb left over).
func TestStateTableDDLNamesTheQuotedTable(t *testing.T) {
	const table = `ops."Progress"`
	for name, ddl := range map[string]string{"progress": progressDDL, "dead letter": deadLetterDDL, "marks": marksDDL} {
		sql := fmt.Sprintf(ddl, table)
		if !strings.HasPrefix(sql, "CREATE TABLE IF NOT EXISTS "+table+" (") || strings.Contains(sql, "%!") {
			t.Errorf("%s DDL: %s", name, sql)
		}
		if !strings.Contains(sql, "slot ") || !strings.Contains(sql, "PRIMARY KEY (slot, ") {
			t.Errorf("%s DDL is not keyed by slot: %s", name, sql)
		}
	}
	if !strings.Contains(deadLetterDDL, "PRIMARY KEY ("+strings.Join(deadLetterKey, ", ")+")") {
		t.Errorf("the dead-letter DDL's key is not deadLetterKey %v:\n%s", deadLetterKey, deadLetterDDL)
	}
	for _, c := range append(progressColumns, deadLetterColumns...) {
		if ddl := progressDDL + deadLetterDDL; !strings.Contains(ddl, "\n    "+c[0]+" ") {
			t.Errorf("column %s, which upgrades add, is not in a CREATE TABLE", c[0])
		}
	}
}

// TestParkedWhereSelectsBySlotIDPositionAndSink: ids and positions
// (Parked.At) go to the server as parameters, never into the text; a
// bare LSN selects every row at it (seq -1).
func TestParkedWhereSelectsBySlotIDPositionAndSink(t *testing.T) {
	tb := Tables{Slot: "s1", DeadLetter: "public.walpost_dead_letter"}
	for _, c := range []struct {
		name  string
		f     ParkedFilter
		where string
		args  []any
	}{
		{"all", ParkedFilter{}, "slot = $1", []any{"s1"}},
		{"unsent of a sink", ParkedFilter{Sink: "kafka'; --", Unsent: true},
			"slot = $1 AND sink = $2 AND resent_at IS NULL", []any{"s1", "kafka'; --"}},
		{"ids and positions", ParkedFilter{IDs: []string{"id-1", "0/16B3748", "0/16B3748:2", "0/1x"}, Sink: "k"},
			"slot = $1 AND (message_id = ANY($2) OR EXISTS (SELECT 1 FROM unnest($3::text[], $4::bigint[]) AS a(l, q)\n\t\t\tWHERE lsn = a.l::pg_lsn AND (a.q < 0 OR seq = a.q))) AND sink = $5",
			[]any{"s1", []string{"id-1", "0/1x"}, []string{"0/16B3748", "0/16B3748"}, []int64{-1, 2}, "k"}},
	} {
		where, args := parkedWhere(tb, c.f)
		if where != c.where || !reflect.DeepEqual(args, c.args) {
			t.Errorf("%s:\n got %s %#v\nwant %s %#v", c.name, where, args, c.where, c.args)
		}
	}
}
