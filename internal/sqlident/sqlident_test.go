package sqlident

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestSplitTakesNamesAsInTheCatalog(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"outbox", []string{"outbox"}},
		{"public.OutboxMessages", []string{"public", "OutboxMessages"}},
		{`"public"."OutboxMessages"`, []string{"public", "OutboxMessages"}},
		{`public."Outbox.Messages"`, []string{"public", "Outbox.Messages"}},
		{`"a""b".c`, []string{`a"b`, "c"}},
		{`my schema.table; DROP TABLE x`, []string{"my schema", "table; DROP TABLE x"}},
		{`ünïcode.Tåble`, []string{"ünïcode", "Tåble"}},
		{`Sales.out"box`, []string{"Sales", `out"box`}}, // literal, as before quoting existed
	} {
		got, err := Split(c.in)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("Split(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
		// Display reads back as the same parts.
		if back, err := Split(Display(got...)); err != nil || !slices.Equal(back, got) {
			t.Errorf("Split(Display(%q)) = %q, %v", got, back, err)
		}
	}
}

func TestSplitRefusesWhatPostgresCannotName(t *testing.T) {
	for in, want := range map[string]string{
		"":                         "has a part 1 that is empty",
		"public.":                  "ends with a dot",
		".t":                       "has a part 1 that is empty",
		`"unterminated`:            "has an unterminated quote",
		`"a"b.c`:                   "has text after a closing quote",
		strings.Repeat("x", 64):    "64 bytes long (PostgreSQL truncates names to 63 bytes)",
		"a\x00b":                   "holding a zero byte",
		"\xff":                     "not valid UTF-8",
		"public." + `"` + `"` + "": "has a part 2 that is empty",
	} {
		_, err := Split(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Split(%q) = %v; want an error containing %q", in, err, want)
		}
	}
}

func TestParseTableWrapsTheCallersSentinel(t *testing.T) {
	bad := errors.New("bad table")
	if _, err := ParseTable("a.b.c", bad); !errors.Is(err, bad) || !strings.Contains(err.Error(), "more than two") {
		t.Fatalf("err = %v", err)
	}
	id, err := ParseTable(`public."Outbox.Messages"`, bad)
	if err != nil || id.Sanitize() != `"public"."Outbox.Messages"` {
		t.Fatalf("id = %v, %v", id, err)
	}
}
