package layout

import (
	"strings"
	"testing"
)

func TestDefaultTableIsTheDefaultLayoutWithOrWithoutCreatedAtAsTime(t *testing.T) {
	withTime := Default
	withTime[Time] = DefaultTime
	otherTime, sentAt, renamed := Default, Default, Default
	otherTime[Time] = "occurred_at"
	sentAt[SentAt] = "sent"
	renamed[Payload] = "body"
	for name, c := range map[string]Columns{"Default": Default, "time: created_at": withTime} {
		if !c.DefaultTable() {
			t.Errorf("%s: DefaultTable = false", name)
		}
	}
	for name, c := range map[string]Columns{"time: occurred_at": otherTime, "sent_at: sent": sentAt, "payload: body": renamed} {
		if c.DefaultTable() {
			t.Errorf("%s: DefaultTable = true", name)
		}
	}
}

// TestRolesNameTheirConfigField: each role's name and field, in the order
// of Columns, and which may be left out with which hint.
func TestRolesNameTheirConfigField(t *testing.T) {
	want := []struct {
		name     string
		optional bool
		hint     string
	}{
		{"id", false, ""},
		{"type", false, ""},
		{"key", true, `use "-"`},
		{"payload", false, ""},
		{"headers", true, `use "-"`},
		{"time", true, "leave it out"},
		{"sent_at", true, "leave it out"},
		{"deliver_at", true, "leave it out"},
		{"expires_at", true, "leave it out"},
	}
	if len(want) != int(NumRoles) {
		t.Fatalf("%d roles, the test knows %d", NumRoles, len(want))
	}
	for r := ID; r < NumRoles; r++ {
		w := want[r]
		if r.String() != w.name || r.Field() != "columns."+w.name || r.Optional() != w.optional {
			t.Errorf("role %d: %q, %q, optional %v; want %q, columns.%s, %v", r, r.String(), r.Field(), r.Optional(), w.name, w.name, w.optional)
		}
		if h := r.OmitHint(); (w.hint == "") != (h == "") || !strings.Contains(h, w.hint) {
			t.Errorf("%s: OmitHint %q, want one saying %q", r, h, w.hint)
		}
	}
}

// TestFromConfigTurnsOmitIntoNoColumn: "-" in the config's columns: is a
// role the table lacks, for every role, and nothing else is changed.
func TestFromConfigTurnsOmitIntoNoColumn(t *testing.T) {
	in := Columns{"id", "type", Omit, "body", Omit, "occurred_at", Omit}
	got := FromConfig(in)
	want := Columns{"id", "type", "", "body", "", "occurred_at", ""}
	if got != want {
		t.Fatalf("FromConfig(%q) = %q, want %q", in, got, want)
	}
	if in[Key] != Omit {
		t.Fatal("FromConfig changed its argument")
	}
	for r := ID; r < NumRoles; r++ {
		if got.Has(r) != (want[r] != "") {
			t.Errorf("Has(%s) = %v", r, got.Has(r))
		}
	}
	if Default.Has(Time) || Default.Has(SentAt) || !Default.Has(Key) || !Default.Has(Headers) {
		t.Errorf("Default maps %q", Default)
	}
}

// TestTableIsQuotedForTheServerAndReadableInMessages: the server gets
// every part quoted; messages show a part bare unless it holds a dot or
// a quote, so that the config reads it back.
func TestTableIsQuotedForTheServerAndReadableInMessages(t *testing.T) {
	for _, c := range []struct {
		schema, name      string
		qualified, string string
	}{
		{"public", "outbox", `"public"."outbox"`, "public.outbox"},
		{"App", "OutboxMessages", `"App"."OutboxMessages"`, "App.OutboxMessages"},
		{"my.schema", `out"box`, `"my.schema"."out""box"`, `"my.schema"."out""box"`},
		{"public", "select", `"public"."select"`, "public.select"},
	} {
		tb := Table{Schema: c.schema, Name: c.name}
		if tb.Qualified() != c.qualified || tb.String() != c.string {
			t.Errorf("%q.%q: Qualified %s, String %s; want %s, %s", c.schema, c.name, tb.Qualified(), tb.String(), c.qualified, c.string)
		}
	}
	cols := Default
	cols[Payload] = `Body "v2"`
	if got := cols.Column(Payload); got != `"Body ""v2"""` {
		t.Errorf("Column(Payload) = %s", got)
	}
	if got := cols.Column(ID); got != `"id"` {
		t.Errorf("Column(ID) = %s", got)
	}
}
