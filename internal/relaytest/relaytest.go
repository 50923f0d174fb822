// Package relaytest holds what the relay's integration tests share: an
// outbox table of their own per test, a config file for it, writing
// messages, and reading back the file sink and the slot.
package relaytest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/publish/sinktest"
	"github.com/walpost/walpost/internal/store"
	"github.com/walpost/walpost/internal/testutil"
	"github.com/walpost/walpost/outbox"
)

// Outbox is one test's own outbox table, publication and slot.
type Outbox struct {
	URL         string
	Table       string // schema-qualified
	Publication string
	Slot        string
}

// NewOutbox creates a table with the default layout (sql/outbox.sql) under
// a name of the test's own; the publication and slot are named after it
// and dropped when the test ends.
func NewOutbox(t testing.TB, url string) Outbox {
	t.Helper()
	name := pgtest.Name(t, "ob")
	ob := Outbox{URL: url, Table: "public." + name, Publication: name, Slot: name}
	pgtest.Exec(t, url, outbox.DDL(ob.Table))
	dropAtEnd(t, url, ob.Slot, ob.Publication, ob.Table)
	return ob
}

// dropAtEnd drops the slot (waiting for a relay to let go of it), the
// publication and the table when the test ends.
func dropAtEnd(t testing.TB, url, slot, publication, table string) {
	t.Cleanup(func() {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			return
		}
		defer conn.Close(ctx)
		// The relay may still be letting go of the slot.
		pgtest.WaitFor(10e9, func() bool {
			_, err := conn.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", slot)
			return err == nil
		})
		conn.Exec(ctx, "DROP PUBLICATION IF EXISTS "+publication)
		conn.Exec(ctx, "DROP TABLE IF EXISTS "+table)
	})
}

// Config writes a config file for ob with the given sinks YAML (a list,
// indented by two spaces) and extra top-level YAML, and returns its path.
func (ob Outbox) Config(t testing.TB, sinks string, extra string) string {
	t.Helper()
	y := fmt.Sprintf(`postgres:
  url: %s
  table: %s
  publication: %s
  slot: %s
  status_interval: 1s
sinks:
%s
log: {level: debug, format: json}
%s
`, ob.URL, ob.Table, ob.Publication, ob.Slot, sinks, extra)
	p := filepath.Join(t.TempDir(), "cdc.yaml")
	if err := os.WriteFile(p, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// WithDeadLetterTable points the config at cfgPath to a dead-letter table
// of the test's own (postgres.dead_letter_table), dropped when the test
// ends, and returns its name.
func WithDeadLetterTable(t testing.TB, url, cfgPath string) string {
	t.Helper()
	dlq := "public." + pgtest.Name(t, "dlq")
	b, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, []byte(strings.Replace(string(b), "postgres:\n", "postgres:\n  dead_letter_table: "+dlq+"\n", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pgtest.Exec(t, url, "DROP TABLE IF EXISTS "+dlq) })
	return dlq
}

// Msg is a message as written by the application, for comparison.
type Msg struct {
	ID, Type, Key string
	Payload       string
	Headers       map[string]string
}

// NewMsg returns a message with a fresh id and a small JSON payload.
func NewMsg(typ, key string, n int) Msg {
	return Msg{ID: uuid.Must(uuid.NewV7()).String(), Type: typ, Key: key,
		Payload: fmt.Sprintf(`{"n": %d, "pad": "%s"}`, n, "x")}
}

// Insert writes msgs to ob's table in tx with outbox.Writer, one INSERT
// each (one WAL record a row, as an application writes them), sent to the
// server in one batch: a 60,000-row transaction is one round trip, not
// 60,000.
func (ob Outbox) Insert(ctx context.Context, tx pgx.Tx, msgs ...Msg) error {
	w := outbox.Writer{Table: ob.Table}
	b := &pgx.Batch{}
	for _, m := range msgs {
		if err := w.Enqueue(ctx, batchExecer{b}, outbox.Message{ID: m.ID, Type: m.Type, Key: m.Key,
			Payload: json.RawMessage(m.Payload), Headers: m.Headers}); err != nil {
			return err
		}
	}
	return tx.SendBatch(ctx, b).Close()
}

// batchExecer queues what outbox.Writer executes into a batch.
type batchExecer struct{ b *pgx.Batch }

func (q batchExecer) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	q.b.Queue(sql, args...)
	return pgconn.CommandTag{}, nil
}

// InsertTx commits msgs in one transaction.
func (ob Outbox) InsertTx(t testing.TB, conn *pgx.Conn, msgs ...Msg) {
	t.Helper()
	ctx := context.Background()
	if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error { return ob.Insert(ctx, tx, msgs...) }); err != nil {
		t.Fatalf("inserting: %v", err)
	}
}

// Line is one line of the file or stdout sink.
type Line = sinktest.Line

// ReadLines reads the file sink's file; a missing file is empty. Every
// line must be valid JSON.
func ReadLines(t testing.TB, path string) []Line {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lines, err := sinktest.ReadLines(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return lines
}

// ParseLines parses JSON lines written to a stream (a stdout sink's
// output); every line must be valid JSON.
func ParseLines(t testing.TB, s string) []Line {
	t.Helper()
	lines, err := sinktest.ReadLines(strings.NewReader(s))
	if err != nil {
		t.Fatal(err)
	}
	return lines
}

// Buffer is a bytes.Buffer safe for concurrent use: a process's or a
// logger's output read by a test while it is written.
type Buffer = testutil.Buffer

// CountLines counts newline-terminated lines without parsing them.
func CountLines(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n := 0
	for _, c := range b {
		if c == '\n' {
			n++
		}
	}
	return n
}

// LineCounter counts the newline-terminated lines of a file that grows,
// such as the file sink's, reading only what was appended since its last
// count: polling a file of 200,000 lines with CountLines reads it whole
// each time. It stops its count after the last complete line, so that a
// torn line the file sink cuts off at restart is never counted; a file
// that got shorter than that is counted anew.
type LineCounter struct {
	path string
	off  int64 // the end of the last complete line counted
	n    int
	buf  []byte
}

// NewLineCounter returns a LineCounter for the file at path (which may not
// exist yet).
func NewLineCounter(path string) *LineCounter { return &LineCounter{path: path} }

// Count returns how many complete lines the file holds now; 0 while it
// does not exist.
func (c *LineCounter) Count() int {
	f, err := os.Open(c.path)
	if err != nil {
		c.off, c.n = 0, 0
		return 0
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || st.Size() < c.off {
		c.off, c.n = 0, 0
	}
	if c.buf == nil {
		c.buf = make([]byte, 1<<20)
	}
	for pos := c.off; ; {
		k, err := f.ReadAt(c.buf, pos)
		if last := bytes.LastIndexByte(c.buf[:k], '\n'); last >= 0 {
			c.n += bytes.Count(c.buf[:last+1], []byte{'\n'})
			c.off = pos + int64(last+1)
		}
		pos += int64(k)
		if err != nil || k == 0 {
			return c.n
		}
	}
}

// SlotConfirmed returns the slot's confirmed_flush_lsn (0 if missing).
func SlotConfirmed(t testing.TB, conn *pgx.Conn, slot string) pglogrepl.LSN {
	t.Helper()
	var s *string
	err := conn.QueryRow(context.Background(), "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&s)
	if err == pgx.ErrNoRows || s == nil {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	lsn, err := pglogrepl.ParseLSN(*s)
	if err != nil {
		t.Fatal(err)
	}
	return lsn
}

// ParseLSN parses a sink line's LSN. It is store.ParseAt's parser, not
// pglogrepl.ParseLSN, whose fmt.Sscanf made checks over every line of
// every sample the largest cost of the kill -9 tests.
func ParseLSN(t testing.TB, s string) pglogrepl.LSN {
	t.Helper()
	lsn, seq, ok := store.ParseAt(s)
	if !ok || seq != -1 {
		t.Fatalf("bad LSN %q", s)
	}
	return lsn
}

// WaitAllDelivered waits until every message of all is in the file sink's
// file at path (duplicates allowed) and returns its lines; on timeout it
// fails the test saying how many are missing, with detail (e.g. the
// relay's log) appended.
func WaitAllDelivered(t testing.TB, path string, all []Msg, timeout time.Duration, detail func() string) []Line {
	t.Helper()
	var lines []Line
	missing := -1
	counter := NewLineCounter(path)
	ok := pgtest.WaitFor(timeout, func() bool {
		if counter.Count() < len(all) {
			return false
		}
		lines = ReadLines(t, path)
		seen := make(map[string]bool, len(lines))
		for _, l := range lines {
			seen[l.ID] = true
		}
		missing = 0
		for _, m := range all {
			if !seen[m.ID] {
				missing++
			}
		}
		return missing == 0
	})
	if !ok {
		d := ""
		if detail != nil {
			d = detail()
		}
		t.Fatalf("%d of %d committed messages missing; %s has %d lines\n%s", missing, len(all), path, CountLines(path), d)
	}
	return lines
}

// CopyTx commits msgs in one transaction written by COPY (pgx CopyFrom),
// as a bulk import does: PostgreSQL writes such rows with heap
// multi-insert, many rows to one WAL record, so that they share an LSN in
// the stream. A Msg with Type "" is written with an empty type (a row the
// relay cannot map).
func (ob Outbox) CopyTx(t testing.TB, conn *pgx.Conn, msgs ...Msg) {
	t.Helper()
	ctx := context.Background()
	schema, name, _ := strings.Cut(ob.Table, ".")
	rows := make([][]any, len(msgs))
	for i, m := range msgs {
		var key any
		if m.Key != "" {
			key = m.Key
		}
		rows[i] = []any{m.ID, m.Type, key, m.Payload}
	}
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		_, err := tx.CopyFrom(ctx, pgx.Identifier{schema, name}, []string{"id", "type", "key", "payload"}, pgx.CopyFromRows(rows))
		return err
	})
	if err != nil {
		t.Fatalf("copying %d rows into %s: %v", len(msgs), ob.Table, err)
	}
}

// PendingInsertLSNs returns, for the INSERTs pending in ob's slot (read
// without consuming them), how many there are and at how many distinct
// LSNs: fewer LSNs than rows means rows share an LSN (multi-insert).
func (ob Outbox) PendingInsertLSNs(t testing.TB, conn *pgx.Conn) (rows, lsns int) {
	t.Helper()
	err := conn.QueryRow(context.Background(), `SELECT count(*), count(DISTINCT lsn)
		FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL, 'proto_version', '1', 'publication_names', $2)
		WHERE substr(data, 1, 1) = 'I'::bytea`, ob.Slot, ob.Publication).Scan(&rows, &lsns)
	if err != nil {
		t.Fatalf("peeking slot %s: %v", ob.Slot, err)
	}
	return rows, lsns
}

// PendingInsertLSNList returns the LSN of each INSERT pending in ob's slot
// (read without consuming them), in stream order.
func (ob Outbox) PendingInsertLSNList(t testing.TB, conn *pgx.Conn) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), `SELECT lsn::text
		FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL, 'proto_version', '1', 'publication_names', $2)
		WHERE substr(data, 1, 1) = 'I'::bytea`, ob.Slot, ob.Publication)
	if err != nil {
		t.Fatalf("peeking slot %s: %v", ob.Slot, err)
	}
	lsns, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("peeking slot %s: %v", ob.Slot, err)
	}
	return lsns
}
