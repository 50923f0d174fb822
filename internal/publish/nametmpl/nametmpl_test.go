package nametmpl

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/walpost/walpost/internal/message"
)

var errTest = errors.New("test: illegal name")

// testRules: lower-case letters, '.' and '_'; a value may not hold '.';
// names starting with "__" are reserved.
var testRules = Rules{
	Broker: "Test", MaxLen: 20, Allowed: "a-z, '.', '_'", Illegal: errTest,
	LegalChar: func(c byte) bool { return c >= 'a' && c <= 'z' || c == '.' || c == '_' },
	Value: func(v string) error {
		if strings.Contains(v, ".") {
			return fmt.Errorf("%w: '.' in a value", errTest)
		}
		return nil
	},
	Reserved: func(name string) error {
		if strings.HasPrefix(name, "__") {
			return fmt.Errorf("%w: reserved", errTest)
		}
		return nil
	},
}

// TestValueAndReservedBoundWhatAMessageChooses: Rules.Value checks each
// placeholder's value (type and key alike), Rules.Reserved the expanded
// name unless the template's leading text is reserved itself; errors wrap
// Rules.Illegal and name the placeholder; a fixed template is the
// operator's name and Fixed says so.
func TestValueAndReservedBoundWhatAMessageChooses(t *testing.T) {
	for _, c := range []struct {
		tmpl, typ, key string
		want           string // "" for accepted
	}{
		{"a.{type}", "b", "k", ""},
		{"a.{type}", "b.c", "k", "{type} \"b.c\""},
		{"a.{key}", "b", "c.d", "{key} \"c.d\""},
		{"{type}", "__x", "k", "reserved"},
		{"_{type}", "_x", "k", "reserved"},
		{"__{type}", "x", "k", ""},
		{"{type}.__", "x", "k", ""},
	} {
		tm, err := Parse("name", c.tmpl, testRules)
		if err != nil {
			t.Fatal(err)
		}
		if tm.Fixed() {
			t.Errorf("%s: Fixed", c.tmpl)
		}
		for range 2 { // the second expansion may come from the cache
			name, err := tm.Expand(&message.Message{ID: "id", Type: c.typ, Key: c.key, HasKey: true})
			switch {
			case c.want == "" && err != nil:
				t.Errorf("%s with type %q key %q: %v", c.tmpl, c.typ, c.key, err)
			case c.want != "" && (!errors.Is(err, errTest) || !strings.Contains(err.Error(), c.want)):
				t.Errorf("%s with type %q key %q: name %q, error %v, want one saying %q", c.tmpl, c.typ, c.key, name, err, c.want)
			}
		}
	}
	fixed, err := Parse("name", "__fixed", testRules)
	if err != nil || !fixed.Fixed() {
		t.Fatalf("fixed template: %v, Fixed %v", err, fixed != nil && fixed.Fixed())
	}
	if name, err := fixed.Expand(&message.Message{Type: "x.y"}); err != nil || name != "__fixed" {
		t.Errorf("fixed template expands to %q, %v", name, err)
	}
}

// TestParseRefusesBadTemplatesNamingTheField: braces that do not pair,
// unknown placeholders, literal text the broker refuses, and literal text
// that leaves no room for what a placeholder brings in.
func TestParseRefusesBadTemplatesNamingTheField(t *testing.T) {
	for _, c := range []struct {
		text, want string
		illegal    bool // the error wraps Rules.Illegal
	}{
		{"", "topic: empty", false},
		{"a.}", `has a '}' without '{'`, false},
		{"a.{type", `has a '{' without '}'`, false},
		{"a.{type}}", `has a '}' without '{'`, false},
		{"a.{id}", "unknown placeholder {id} (use {type} or {key})", false},
		{"a.{}", "unknown placeholder {}", false},
		{"a.{Type}", "unknown placeholder {Type}", false},
		{"A.{type}", `character 'A'`, true},
		{"a-{type}", `character '-'`, true},
		{"aaaaaaaaaa.bbbbbbbbb{type}", "leaves no room for its placeholders", false}, // 20 literal characters
		{"Fixed", `character 'F' at offset 0`, true},
		{"aaaaaaaaaa.bbbbbbbbbb", "21 characters, over Test's limit of 20", true},
	} {
		tm, err := Parse("topic", c.text, testRules)
		if err == nil || !strings.HasPrefix(err.Error(), "topic: ") || !strings.Contains(err.Error(), c.want) || errors.Is(err, errTest) != c.illegal {
			t.Errorf("Parse(%q) = %v, %v; want an error starting with the field, saying %q (wraps Illegal: %v)", c.text, tm, err, c.want, c.illegal)
		}
	}
	for _, ok := range []string{"{type}", "{key}", "a.{type}.{key}", "{type}{key}", "aaaaaaaaaa.bbbbbbbb{type}", "aaaaaaaaaa.bbbbbbbbb"} {
		if _, err := Parse("topic", ok, testRules); err != nil {
			t.Errorf("Parse(%q): %v", ok, err)
		}
	}
}

// TestExpandFillsTypeAndKey: {type} is the message's type, {key} its
// ordering key, the id when the key is NULL; placeholders may repeat and
// stand anywhere; the field and text are kept for errors.
func TestExpandFillsTypeAndKey(t *testing.T) {
	msg := func(typ, key string, hasKey bool) *message.Message {
		return &message.Message{ID: "idx", Type: typ, Key: key, HasKey: hasKey}
	}
	for _, c := range []struct {
		tmpl string
		m    *message.Message
		want string
	}{
		{"out.{type}", msg("order", "k", true), "out.order"},
		{"{type}_x", msg("order", "k", true), "order_x"},
		{"q.{key}", msg("order", "cust", true), "q.cust"},
		{"q.{key}", msg("order", "", false), "q.idx"},
		{"{type}.{key}.{type}", msg("a", "b", true), "a.b.a"},
		{"{type}{key}", msg("a", "b", true), "ab"},
		{"fixed", msg("any.thing", "", false), "fixed"},
	} {
		tm, err := Parse("queue", c.tmpl, testRules)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := tm.Expand(c.m); err != nil || got != c.want {
			t.Errorf("%s: Expand = %q, %v; want %q", c.tmpl, got, err, c.want)
		}
		if tm.Field() != "queue" || tm.Text() != c.tmpl {
			t.Errorf("%s: Field %q, Text %q", c.tmpl, tm.Field(), tm.Text())
		}
	}
}

// TestExpandChecksEveryNameAMessageBrings: an expanded name over the
// limit, empty, or with a character the broker refuses is an error
// wrapping Illegal that gives the name, also when the same type came
// before with an acceptable name, and with {key} for every key (a name
// per key is not cached by type).
func TestExpandChecksEveryNameAMessageBrings(t *testing.T) {
	byType, err := Parse("topic", "t.{type}", testRules)
	if err != nil {
		t.Fatal(err)
	}
	byKey, err := Parse("topic", "k.{key}", testRules)
	if err != nil {
		t.Fatal(err)
	}
	onlyType, err := Parse("topic", "{type}", testRules)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		tm       *Template
		typ, key string
		name     string
		want     string // "" for accepted
	}{
		{byType, "ok", "k", "t.ok", ""},
		{byType, "ok", "K", "t.ok", ""}, // the key does not matter
		{byType, "Ok", "k", "t.Ok", "character 'O' at offset 2"},
		{byType, strings.Repeat("x", 19), "k", "t." + strings.Repeat("x", 19), "21 characters, over Test's limit of 20"},
		{byType, strings.Repeat("x", 18), "k", "t." + strings.Repeat("x", 18), ""},
		{byKey, "ok", "good", "k.good", ""},
		{byKey, "ok", "bad-key", "k.bad-key", "character '-' at offset 5"},
		{byKey, "ok", "fine", "k.fine", ""},
		{onlyType, "", "k", "", "empty"},
	} {
		name, err := c.tm.Expand(&message.Message{ID: "id", Type: c.typ, Key: c.key, HasKey: true})
		if name != c.name {
			t.Errorf("%s with type %q key %q: name %q, want %q", c.tm.Text(), c.typ, c.key, name, c.name)
		}
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s with type %q key %q: %v", c.tm.Text(), c.typ, c.key, err)
		case c.want != "" && (!errors.Is(err, errTest) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s with type %q key %q: %v, want an Illegal error saying %q", c.tm.Text(), c.typ, c.key, err, c.want)
		}
	}
}

// TestExpandCacheStaysBounded: a stream of ever new types keeps at most
// maxCache names and still expands each correctly.
func TestExpandCacheStaysBounded(t *testing.T) {
	tm, err := Parse("topic", "{type}", Rules{Broker: "Any", MaxLen: 100, Illegal: errTest, LegalChar: func(byte) bool { return true }})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3*maxCache + 7 {
		typ := fmt.Sprintf("type%d", i)
		if name, err := tm.Expand(&message.Message{Type: typ}); err != nil || name != typ {
			t.Fatalf("Expand #%d = %q, %v", i, name, err)
		}
		if len(tm.cache) > maxCache {
			t.Fatalf("after %d types the cache holds %d names, over %d", i+1, len(tm.cache), maxCache)
		}
	}
}

// TestCheckAppliesExtraBeforeCharacters: Rules.Check runs Extra (a
// broker's rule beyond characters) on the whole name.
func TestCheckAppliesExtraBeforeCharacters(t *testing.T) {
	r := testRules
	r.Extra = func(name string) error {
		if name == "." || name == ".." {
			return fmt.Errorf("%w: %q is reserved", errTest, name)
		}
		return nil
	}
	for name, want := range map[string]string{".": `"." is reserved`, "..": `".." is reserved`, "...": "", "a": "", "": "empty"} {
		err := r.Check(name)
		if (want == "") != (err == nil) || err != nil && (!errors.Is(err, errTest) || !strings.Contains(err.Error(), want)) {
			t.Errorf("Check(%q) = %v, want %q", name, err, want)
		}
	}
}
