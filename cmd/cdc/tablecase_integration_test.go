package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/relaytest"
)

// TestIntegrationATableNamedInAnotherCaseIsNamedNotCreated: the outbox
// exists as a quoted mixed-case table (as Entity Framework creates
// "OutboxMessages") while postgres.table names it in lower case. cdc init
// creates nothing and exits 1 naming the existing table and the
// postgres.table to write, and cdc run exits 1 with the same hint: neither
// says to run cdc init, which would create a second, empty table.
func TestIntegrationATableNamedInAnotherCaseIsNamedNotCreated(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	quoted := "Case" + pgtest.Name(t, "Outbox") // mixed case: created quoted
	lower := strings.ToLower(quoted)
	pgtest.Exec(t, url, fmt.Sprintf(`CREATE TABLE public.%q (LIKE %s INCLUDING ALL)`, quoted, ob.Table))
	t.Cleanup(func() {
		pgtest.Exec(t, url, fmt.Sprintf(`DROP TABLE IF EXISTS public.%q; DROP TABLE IF EXISTS public.%s`, quoted, lower))
	})
	cfg := ob.Config(t, "  - {name: out, kind: stdout}", "")
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte(strings.Replace(string(b), "table: "+ob.Table+"\n", "table: public."+lower+"\n", 1)), 0o600); err != nil {
		t.Fatal(err)
	}

	for _, cmd := range []string{"init", "run"} {
		code, stdout, stderr := cdc(t, nil, cmd, "--config", cfg)
		all := stdout + stderr
		if code != 1 || !strings.Contains(all, "but public."+quoted+" does") || !strings.Contains(all, "set postgres.table: public."+quoted) ||
			strings.Contains(all, "create it with 'cdc init'") {
			t.Errorf("cdc %s on a table named in another case: exit %d, want 1 naming public.%s, not cdc init\n%s", cmd, code, quoted, all)
		}
	}
	var created bool
	if err := pgtest.Connect(t, url).QueryRow(context.Background(), "SELECT to_regclass($1) IS NOT NULL", "public."+lower).Scan(&created); err != nil || created {
		t.Fatalf("cdc init created public.%s beside public.%q (%v)", lower, quoted, err)
	}
}
