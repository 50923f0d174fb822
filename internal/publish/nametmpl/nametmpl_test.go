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
