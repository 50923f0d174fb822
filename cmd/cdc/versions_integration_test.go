package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/internal/pgtest"
)

// The suite on every PostgreSQL version users run (docs/testing.md,
// "PostgreSQL versions"): the rest of this package runs on the machine's
// own server; TestIntegrationVersions runs the core end-to-end proofs on
// the other supported versions (pgtest.BinFor), each version on clusters
// of its own, the versions in parallel.

// versionsUnderTest returns the major versions TestIntegrationVersions
// runs on: those WALPOST_PG_VERSIONS lists ("14,17"; "all" for every
// supported version), else every supported version but the machine's own
// (own; 0 with WALPOST_PG_VERSIONS), on which the rest of the suite runs.
func versionsUnderTest(t *testing.T) (vs []int, own int) {
	t.Helper()
	env := strings.TrimSpace(os.Getenv("WALPOST_PG_VERSIONS"))
	if env == "all" {
		return pgtest.Versions, 0
	}
	if env != "" {
		for _, f := range strings.FieldsFunc(env, func(r rune) bool { return r == ',' || r == ' ' }) {
			v, err := strconv.Atoi(f)
			if err != nil || v < pgtest.Versions[0] || v > pgtest.Versions[len(pgtest.Versions)-1] {
				t.Fatalf("WALPOST_PG_VERSIONS=%q: %q is not a supported major version (%v)", env, f, pgtest.Versions)
			}
			vs = append(vs, v)
		}
		return vs, 0
	}
	if bin, err := pgtest.FindBin(); err == nil {
		own, _ = pgtest.ServerVersion(bin)
	}
	for _, v := range pgtest.Versions {
		if v != own {
			vs = append(vs, v)
		}
	}
	return vs, own
}

// TestIntegrationVersions runs the core end-to-end proofs on each
// PostgreSQL version (versionsUnderTest), in parallel, each on a cluster
// of its own, one scenario after another: the cdc binary killed with
// kill -9 in a large transaction, rows of one COPY sharing an LSN across a
// kill -9, the publication changed under the relay, the trust checks
// that depend on the version's defaults (PostgreSQL 14's public schema,
// where PUBLIC may CREATE), postgres.failover_slot (refused before 17, a
// failover slot from 17 on), and last, with max_slot_wal_keep_size = 1MB,
// a slot the server invalidates and cdc recover. On 17 and 18, a failover to a standby that synchronizes
// the slot runs alongside (failoverToASynchronizedStandby). A version that
// cannot be had here is skipped, saying why.
func TestIntegrationVersions(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("skipped under -short: needs PostgreSQL servers")
	}
	vs, own := versionsUnderTest(t)
	if own != 0 {
		t.Run(fmt.Sprintf("pg%d", own), func(t *testing.T) {
			t.Skipf("PostgreSQL %d is the machine's own: the rest of the suite runs on it; WALPOST_PG_VERSIONS=%d runs these scenarios on it too", own, own)
		})
	}
	for _, v := range vs {
		t.Run(fmt.Sprintf("pg%d", v), func(t *testing.T) {
			t.Parallel()
			if v >= 17 {
				t.Run("failover", func(t *testing.T) {
					t.Parallel()
					failoverToASynchronizedStandby(t, v)
				})
			}
			t.Run("core", func(t *testing.T) {
				t.Parallel()
				coreScenarios(t, v)
			})
		})
	}
}

// coreScenarios runs the core scenarios one after another on a cluster of
// PostgreSQL v of their own.
func coreScenarios(t *testing.T, v int) {
	start := time.Now()
	c := pgtest.StartCluster(t, pgtest.Options{Version: v})
	if c.Major != v {
		t.Fatalf("asked for PostgreSQL %d, got %d", v, c.Major)
	}
	url := c.URL("postgres")
	t.Run("kill9", func(t *testing.T) { kill9MidTransaction(t, url) })
	t.Run("copy", func(t *testing.T) { copyPartialAckThenRestart(t, url, true) })
	t.Run("copy-scheduled", func(t *testing.T) { copyRowsKeepTheirOwnSchedule(t, url) })
	t.Run("publication", func(t *testing.T) { publicationDropAndAddTable(t, url) })
	t.Run("squat", func(t *testing.T) { squatOnVersion(t, url, v) })
	t.Run("failover-slot", func(t *testing.T) { failoverSlotIsRefusedBeforePostgres17(t, url) })
	// Last: a small max_slot_wal_keep_size would invalidate the
	// slots of the scenarios above, which lag on purpose.
	pgtest.Exec(t, url, "ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'", "SELECT pg_reload_conf()")
	t.Run("lost-slot", func(t *testing.T) { runOnAnInvalidatedSlot(t, url) })
	t.Run("recover", func(t *testing.T) { recoverRelaysEveryRowWhoseSentAtIsNull(t, url) })
	t.Logf("PostgreSQL %d: the scenarios took %v", v, time.Since(start).Round(100*time.Millisecond))
}

// squatOnVersion runs the trust checks on state tables in the public
// schema as PostgreSQL v made it. Up to 14 PUBLIC may CREATE there: a
// LOGIN-only role's squatted adopt table, progress trigger and outbox are
// refused, and cdc init and cdc run warn. From 15 on it may not: the role cannot
// create there, nothing is said, and the refusal is checked in a schema
// opened to PUBLIC instead (the catalog queries of the checks on this
// version).
func squatOnVersion(t *testing.T, url string, v int) {
	var publicCreate bool
	if err := pgtest.Connect(t, url).QueryRow(context.Background(), "SELECT has_schema_privilege('public', 'public', 'CREATE')").Scan(&publicCreate); err != nil {
		t.Fatal(err)
	}
	if want := v < 15; publicCreate != want {
		t.Fatalf("PostgreSQL %d: PUBLIC may CREATE in schema public: %v, want %v", v, publicCreate, want)
	}
	if publicCreate {
		squatAdoptTableIsRefusedByInit(t, newSquatInPublic(t, url))
		squatProgressTriggerIsRefused(t, newSquatInPublic(t, url))
		squatWarns(t, newSquatInPublic(t, url), true)
		squatOutboxIsRefused(t, newSquatInPublic(t, url))
		return
	}
	s := newSquatInPublic(t, url)
	conn, err := pgx.Connect(context.Background(), s.attackerURL)
	if err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(context.Background(), attackerAdoptDDL(s.adopt))
	conn.Close(context.Background())
	if err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("PostgreSQL %d: a LOGIN-only role creating %s: %v, want permission denied", v, s.adopt, err)
	}
	squatWarns(t, s, false)
	squatAdoptTableIsRefusedByInit(t, newSquatOn(t, url, true))
}
