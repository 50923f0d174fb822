package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/outbox"
)

// pad makes the JSON payload about 300 bytes:
// {"n": 123, "ts": 1733150000000000, "pad": "<pad>"}.
var pad = strings.Repeat("0123456789abcdefghijklmnopqrstuvwxyz", 8)[:256]

// payloadExpr is the payload of row g: its insert time (clock_timestamp(),
// unix µs) travels in "ts" so that a reader can measure latency from it.
const payloadExpr = `jsonb_build_object('n', g, 'ts', (extract(epoch from clock_timestamp()) * 1000000)::bigint, 'pad', $3::text)`

// names is one run's own table, publication and slot.
type names struct {
	Table, Publication, Slot string // Table is unqualified, in schema public
}

func newNames(system, run string) names {
	var b [3]byte
	_, _ = rand.Read(b[:])
	n := fmt.Sprintf("bench_%s_%s_%s", system, run, hex.EncodeToString(b[:]))
	n = strings.ReplaceAll(strings.ToLower(n), "-", "_")
	return names{Table: n, Publication: n, Slot: n}
}

func (n names) Qualified() string { return "public." + n.Table }

// createOutbox creates the table with the default layout, and for a
// polling relay adds sent_at with the partial index the pattern uses.
func createOutbox(ctx context.Context, conn *pgx.Conn, n names, polling bool) error {
	if _, err := conn.Exec(ctx, outbox.DDL(n.Qualified())); err != nil {
		return fmt.Errorf("creating %s: %w", n.Table, err)
	}
	if polling {
		for _, s := range []string{
			fmt.Sprintf("ALTER TABLE %s ADD COLUMN sent_at timestamptz NULL", n.Table),
			fmt.Sprintf("CREATE INDEX %s_unsent ON %s (created_at) WHERE sent_at IS NULL", n.Table, n.Table),
		} {
			if _, err := conn.Exec(ctx, s); err != nil {
				return fmt.Errorf("%s: %w", s, err)
			}
		}
	}
	return nil
}

// createReplication creates the publication (inserts only) and the pgoutput
// slot, as `cdc init` does.
func createReplication(ctx context.Context, conn *pgx.Conn, n names) error {
	if _, err := conn.Exec(ctx, fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert')", n.Publication, n.Table)); err != nil {
		return fmt.Errorf("creating publication: %w", err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", n.Slot); err != nil {
		return fmt.Errorf("creating slot: %w", err)
	}
	return nil
}

// dropAll drops the run's slot (waiting until no process holds it),
// publication and table.
func dropAll(ctx context.Context, conn *pgx.Conn, n names) error {
	var errs []error
	ok := pgtest.WaitFor(30*time.Second, func() bool {
		_, err := conn.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", n.Slot)
		return err == nil
	})
	if !ok {
		errs = append(errs, fmt.Errorf("slot %s could not be dropped (still active?)", n.Slot))
	}
	if _, err := conn.Exec(ctx, "DROP PUBLICATION IF EXISTS "+n.Publication); err != nil {
		errs = append(errs, err)
	}
	if _, err := conn.Exec(ctx, "DROP TABLE IF EXISTS "+n.Table); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// insertRows commits rows first..first+count-1 of the run as one
// transaction (one statement).
func insertRows(ctx context.Context, conn *pgx.Conn, table string, first, count int) error {
	_, err := conn.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (id, type, key, payload)
		SELECT gen_random_uuid(), 'order.created', 'k' || (g %% 100), %s FROM generate_series($1::int, $2::int) g`, table, payloadExpr),
		first, first+count-1, pad)
	return err
}

// insertBacklog commits total rows in transactions of txRows.
func insertBacklog(ctx context.Context, conn *pgx.Conn, table string, total, txRows int) error {
	for done := 0; done < total; done += txRows {
		if err := insertRows(ctx, conn, table, done+1, min(txRows, total-done)); err != nil {
			return err
		}
	}
	return nil
}

// insertBigMessage commits one row whose payload is {"n": 1, "blob":
// "<size hex digits>"}, the digits random (so that TOAST cannot compress
// them away), and returns the payload's size as JSON text: the bytes of
// the column pgoutput sends.
func insertBigMessage(ctx context.Context, conn *pgx.Conn, table string, size int) (int64, error) {
	raw := make([]byte, (size+1)/2)
	_, _ = rand.Read(raw)
	blob := hex.EncodeToString(raw)[:size]
	var n int64
	err := conn.QueryRow(ctx, fmt.Sprintf(`INSERT INTO %s (id, type, key, payload)
		VALUES (gen_random_uuid(), 'order.created', 'big', jsonb_build_object('n', 1, 'blob', $1::text))
		RETURNING octet_length(payload::text)`, table), blob).Scan(&n)
	return n, err
}

// pace commits transactions of txRows rows at rate rows per second for d,
// on schedule (open loop: a late transaction does not push the next ones
// back). It returns the rows committed and the time taken.
func pace(ctx context.Context, conn *pgx.Conn, table string, rate float64, txRows int, d time.Duration) (int, time.Duration, error) {
	interval := time.Duration(float64(time.Second) * float64(txRows) / rate)
	start := time.Now()
	n := 0
	for i := 0; ; i++ {
		at := start.Add(time.Duration(i) * interval)
		if at.Sub(start) >= d {
			break
		}
		if w := time.Until(at); w > 0 {
			time.Sleep(w)
		}
		if err := insertRows(ctx, conn, table, n+1, txRows); err != nil {
			return n, time.Since(start), err
		}
		n += txRows
	}
	return n, time.Since(start), nil
}

func currentLSN(ctx context.Context, conn *pgx.Conn) (pglogrepl.LSN, error) {
	var s string
	if err := conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&s); err != nil {
		return 0, err
	}
	return pglogrepl.ParseLSN(s)
}

func slotConfirmed(ctx context.Context, conn *pgx.Conn, slot string) (pglogrepl.LSN, bool, error) {
	var s *string
	var active bool
	err := conn.QueryRow(ctx, "SELECT confirmed_flush_lsn::text, active FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&s, &active)
	if err != nil {
		return 0, false, err
	}
	if s == nil {
		return 0, active, nil
	}
	l, err := pglogrepl.ParseLSN(*s)
	return l, active, err
}

// waitConfirmed polls the slot every 5 ms until its confirmed_flush_lsn
// reaches end, and returns when it did.
func waitConfirmed(ctx context.Context, conn *pgx.Conn, slot string, end pglogrepl.LSN, timeout time.Duration, alive func() error) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	for {
		c, _, err := slotConfirmed(ctx, conn, slot)
		if err != nil {
			return time.Time{}, err
		}
		if c >= end {
			return time.Now(), nil
		}
		if alive != nil {
			if err := alive(); err != nil {
				return time.Time{}, err
			}
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("slot %s confirmed %s, not %s, after %v", slot, c, end, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitSlotActive waits until a process streams from the slot.
func waitSlotActive(ctx context.Context, conn *pgx.Conn, slot string, timeout time.Duration, alive func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		_, active, err := slotConfirmed(ctx, conn, slot)
		if err == nil && active {
			return nil
		}
		if alive != nil {
			if err := alive(); err != nil {
				return err
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("slot %s not active after %v", slot, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// tableLoad is what a polling relay left behind in its table.
type tableLoad struct {
	DeadTuples      int64 `json:"n_dead_tup"`
	LiveTuples      int64 `json:"n_live_tup"`
	Autovacuums     int64 `json:"autovacuum_count"`
	PartialIdxBytes int64 `json:"partial_index_bytes"`
	PKeyBytes       int64 `json:"pkey_bytes"`
	TableBytes      int64 `json:"table_bytes"`
}

func readTableLoad(ctx context.Context, conn *pgx.Conn, n names) (tableLoad, error) {
	var l tableLoad
	// The poller has exited, so its backend flushed its statistics; flush
	// ours and give the stats a moment.
	_, _ = conn.Exec(ctx, "SELECT pg_stat_force_next_flush()")
	time.Sleep(600 * time.Millisecond)
	_, _ = conn.Exec(ctx, "SELECT pg_stat_clear_snapshot()")
	err := conn.QueryRow(ctx, `SELECT n_dead_tup, n_live_tup, autovacuum_count,
			pg_relation_size(to_regclass($2)), pg_relation_size(to_regclass($3)), pg_relation_size(relid)
		FROM pg_stat_user_tables WHERE relname = $1`, n.Table, n.Table+"_unsent", n.Table+"_pkey").
		Scan(&l.DeadTuples, &l.LiveTuples, &l.Autovacuums, &l.PartialIdxBytes, &l.PKeyBytes, &l.TableBytes)
	return l, err
}

// serverCPU returns the CPU seconds the Postgres server has used: the
// postmaster, its live children, and (through the postmaster's cutime and
// cstime) every child it has reaped.
func serverCPU(c *pgtest.Cluster) float64 {
	b, err := os.ReadFile(filepath.Join(c.Dir, "data", "postmaster.pid"))
	if err != nil {
		return 0
	}
	pm, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	st, err := readStat(pm)
	if err != nil {
		return 0
	}
	total := st.cpu() + st.childCPU()
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == pm {
			continue
		}
		s, err := readStat(pid)
		if err == nil && s.ppid == pm {
			total += s.cpu()
		}
	}
	return total
}

// cpuSnap is the CPU counters at the start of a measured window.
type cpuSnap struct {
	busy, self, server float64
	at                 time.Time
}

func (b *bench) snap() cpuSnap {
	return cpuSnap{busy: machineBusy(), self: procCPU(os.Getpid()), server: serverCPU(b.cluster), at: time.Now()}
}

// since returns the PostgreSQL server's CPU seconds since s, and the cores
// that everything else on the machine used meanwhile: all busy time less
// the server's, the bench's own (producer, pg_recvlogical reader, Kafka
// broker) and relay (the system's process).
func (b *bench) since(s cpuSnap, relay float64) (server, otherCores float64) {
	server = serverCPU(b.cluster) - s.server
	other := machineBusy() - s.busy - (procCPU(os.Getpid()) - s.self) - server - relay
	if el := time.Since(s.at).Seconds(); el > 0 {
		otherCores = math.Max(other, 0) / el
	}
	return server, otherCores
}
