package pgtest

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestIntegrationStandbyConflictInvalidatesALogicalSlot: on a standby of
// PostgreSQL 16+ a logical slot is created (pg_log_standby_snapshot on the
// primary lets it reach its consistent point at once), and with
// hot_standby_feedback off a VACUUM of catalog rows the slot still needs
// invalidates it (StandbyConflict): the recipe the relay's conflict tests
// use.
func TestIntegrationStandbyConflictInvalidatesALogicalSlot(t *testing.T) {
	for _, v := range []int{16, 18} {
		t.Run(fmt.Sprint(v), func(t *testing.T) {
			t.Parallel()
			p := StartCluster(t, Options{Version: v})
			s := StandbyOf(t, p, "hot_standby_feedback = on")
			ctx := context.Background()
			sc := Connect(t, s.URL("postgres"))
			done := make(chan error, 1)
			go func() {
				_, err := sc.Exec(ctx, "SELECT pg_create_logical_replication_slot('sb', 'pgoutput')")
				done <- err
			}()
			start := time.Now()
			if err := LogStandbySnapshotUntil(p, done, 30*time.Second); err != nil {
				t.Fatal(err)
			}
			t.Logf("PostgreSQL %d: slot created on the standby in %v", v, time.Since(start).Round(time.Millisecond))
			if err := StandbyConflict(p, s, "sb", time.Minute); err != nil {
				t.Fatal(err)
			}
			var row string
			if err := sc.QueryRow(ctx, "SELECT to_jsonb(s)::text FROM pg_replication_slots s WHERE slot_name = 'sb'").Scan(&row); err != nil {
				t.Fatal(err)
			}
			t.Logf("PostgreSQL %d: %s", v, row)
		})
	}
}
