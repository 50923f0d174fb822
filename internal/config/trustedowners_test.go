package config

import (
	"slices"
	"strings"
	"testing"
)

// TestTrustedOwnersIsAListOfRoleNames: postgres.trusted_owners takes role
// names as in the catalog (no case folding), with a table or a
// table-less outbox; an empty name, one PostgreSQL would truncate, a
// scalar and a list of mappings are refused naming the field.
func TestTrustedOwnersIsAListOfRoleNames(t *testing.T) {
	base := "postgres:\n  url: postgres://u@h/db\n%s\nsinks: [{name: out, kind: stdout}]\n"
	for _, extra := range []string{"", "  source: messages"} {
		c, err := Parse([]byte(strings.Replace(base, "%s", "  trusted_owners: [ops, \"Deploy Bot\"]\n"+extra, 1)), env(nil))
		if err != nil || !slices.Equal(c.Postgres.TrustedOwners, []string{"ops", "Deploy Bot"}) {
			t.Fatalf("trusted_owners (%q): %v %+v", extra, err, c)
		}
	}
	if c, err := Parse([]byte(minimal), env(nil)); err != nil || c.Postgres.TrustedOwners != nil {
		t.Fatalf("default trusted_owners: %v %v", err, c.Postgres.TrustedOwners)
	}
	for _, c := range []struct{ yaml, want string }{
		{"  trusted_owners: ['']", `postgres.trusted_owners[0]: "" is not a role name: it is empty`},
		{"  trusted_owners: [ok, " + strings.Repeat("r", 64) + "]", "postgres.trusted_owners[1]: "},
		{"  trusted_owners: ops", "postgres.trusted_owners: want a list"},
		{"  trusted_owners: [{name: ops}]", "postgres.trusted_owners[0]: want a single value"},
	} {
		_, err := Parse([]byte(strings.Replace(base, "%s", c.yaml, 1)), env(nil))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.yaml, err, c.want)
		}
	}
}
