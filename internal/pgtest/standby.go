package pgtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Standbys that decode (docs/operations.md, "Decoding from a standby").
//
// PostgreSQL 16+ lets a physical standby hold logical slots. StartStandby
// makes one from StartReplica (a physical slot on the primary,
// primary_slot_name on the standby) with extra settings, typically
// hot_standby_feedback = on; Configure changes settings of a running
// server (those a reload applies); LogStandbySnapshot lets a slot being
// created on a standby reach its consistent point without waiting for
// the primary's next running-xacts record.

// StartStandby is StartReplica with settings (postgresql.conf lines)
// applied once the standby runs (a reload: hot_standby_feedback and
// other reloadable settings). The standby's Major is the primary's.
func (c *Cluster) StartStandby(settings ...string) (*Cluster, error) {
	r, err := c.StartReplica()
	if err != nil {
		return nil, err
	}
	r.Major = c.Major
	if len(settings) > 0 {
		if err := r.Configure(settings...); err != nil {
			r.Close()
			return nil, err
		}
	}
	return r, nil
}

// StandbyOf starts a standby of c (StartStandby) for the test, waits
// until it replays what c wrote before, and closes it when the test ends.
func StandbyOf(tb testing.TB, c *Cluster, settings ...string) *Cluster {
	tb.Helper()
	r, err := c.StartStandby(settings...)
	if err != nil {
		tb.Fatalf("starting a standby of PostgreSQL %d: %v", c.Major, err)
	}
	tb.Cleanup(func() { r.Close() })
	if err := WaitReplayed(c, r, time.Minute); err != nil {
		tb.Fatal(err)
	}
	return r
}

// Configure appends settings to the server's postgresql.conf and reloads
// it (pg_ctl reload): later lines win. Settings that need a restart take
// effect at the next Start.
func (c *Cluster) Configure(settings ...string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	f, err := os.OpenFile(filepath.Join(c.dataDir(), "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString("\n# pgtest configure\n" + strings.Join(settings, "\n") + "\n")
	f.Close()
	if err != nil {
		return err
	}
	if out, err := c.run("pg_ctl", "reload", "-D", c.dataDir()); err != nil {
		return fmt.Errorf("pgtest: pg_ctl reload: %v\n%s", err, out)
	}
	return nil
}

// WaitReplayed waits until standby has replayed the WAL primary had
// written when it was called.
func WaitReplayed(primary, standby *Cluster, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	p, err := pgx.Connect(ctx, primary.URL("postgres"))
	if err != nil {
		return err
	}
	defer p.Close(context.Background())
	var at string
	if err := p.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&at); err != nil {
		return err
	}
	s, err := pgx.Connect(ctx, standby.URL("postgres"))
	if err != nil {
		return err
	}
	defer s.Close(context.Background())
	for {
		var done bool
		if err := s.QueryRow(ctx, "SELECT COALESCE(pg_last_wal_replay_lsn() >= $1::pg_lsn, true)", at).Scan(&done); err != nil {
			return fmt.Errorf("pgtest: waiting for the standby to replay %s: %w", at, err)
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgtest: the standby did not replay %s within %v", at, timeout)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// LogStandbySnapshotUntil calls pg_log_standby_snapshot() on primary
// every 100 ms until done yields (the creation of a slot on its standby
// returned: its error is returned) or timeout passes.
func LogStandbySnapshotUntil(primary *Cluster, done <-chan error, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, primary.URL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for {
		if _, err := conn.Exec(ctx, "SELECT pg_log_standby_snapshot()"); err != nil && ctx.Err() == nil {
			return fmt.Errorf("pgtest: pg_log_standby_snapshot: %w", err)
		}
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
			return fmt.Errorf("pgtest: the slot was not created on the standby within %v", timeout)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// StandbyConflict invalidates the logical slot named slot on standby by a
// recovery conflict (rows_removed), as PostgreSQL's own tests do
// (src/test/recovery/t/035_standby_logical_decoding.pl): hot_standby_feedback
// off on the standby, waiting until primary's physical slot for it
// holds no xmin any more, then catalog rows made dead on primary
// (CREATE and DROP TABLE) and vacuumed (VACUUM pg_class), until the
// standby says the slot is invalidated (wal_status lost). The standby is
// left with hot_standby_feedback off: Configure turns it on again.
func StandbyConflict(primary, standby *Cluster, slot string, timeout time.Duration) error {
	if err := standby.Configure("hot_standby_feedback = off"); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	p, err := pgx.Connect(ctx, primary.URL("postgres"))
	if err != nil {
		return err
	}
	defer p.Close(context.Background())
	s, err := pgx.Connect(ctx, standby.URL("postgres"))
	if err != nil {
		return err
	}
	defer s.Close(context.Background())
	phys := fmt.Sprintf("pgtest_replica_%d", standby.Port)
	for {
		var free bool
		if err := p.QueryRow(ctx, "SELECT xmin IS NULL AND catalog_xmin IS NULL FROM pg_replication_slots WHERE slot_name = $1", phys).Scan(&free); err != nil {
			return fmt.Errorf("pgtest: reading the standby's physical slot: %w", err)
		}
		if free {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgtest: the primary's slot %s kept an xmin after hot_standby_feedback = off", phys)
		case <-time.After(50 * time.Millisecond):
		}
	}
	for i := 0; ; i++ {
		for _, q := range []string{
			fmt.Sprintf("CREATE TABLE pgtest_conflict_%d (x int)", i), fmt.Sprintf("DROP TABLE pgtest_conflict_%d", i),
			"VACUUM pg_class", "SELECT pg_switch_wal()",
		} {
			if _, err := p.Exec(ctx, q); err != nil {
				return fmt.Errorf("pgtest: %s: %w", q, err)
			}
		}
		var lost bool
		if err := s.QueryRow(ctx, "SELECT COALESCE(bool_or(wal_status = 'lost'), false) FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&lost); err != nil {
			return fmt.Errorf("pgtest: reading slot %s on the standby: %w", slot, err)
		}
		if lost {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgtest: slot %s on the standby was not invalidated within %v (%d rounds)", slot, timeout, i+1)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
