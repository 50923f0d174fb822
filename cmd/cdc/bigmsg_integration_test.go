package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/relaytest"
)

// bigMsgSize is the payload size of the big-message tests: 50 MB, or
// WALPOST_BIGMSG_MB.
func bigMsgSize(t *testing.T) int {
	if s := os.Getenv("WALPOST_BIGMSG_MB"); s != "" {
		mb, err := strconv.Atoi(s)
		if err != nil || mb <= 0 {
			t.Fatalf("WALPOST_BIGMSG_MB=%q: want a positive number", s)
		}
		return mb << 20
	}
	return 50 << 20
}

// bigMsgCase is one way to relay a big message: the payload column's type,
// the SQL expression of a payload of about n bytes (%[1]d is n), the text
// the file sink's line must hold, and whether a discard sink takes the
// message too (in the same relay: one run proves the bound for both
// sinks' paths, where a run of each took twice the time).
type bigMsgCase struct {
	name    string
	column  string // "" keeps the outbox's jsonb
	value   string
	want    func(n int) []byte
	discard bool
}

var bigMsgCases = []bigMsgCase{
	{name: "jsonb-file-and-discard", value: `jsonb_build_object('pad', repeat('x', %[1]d))`, discard: true,
		want: func(n int) []byte { return []byte(`"payload":{"pad": "` + string(bytes.Repeat([]byte("x"), n)) + `"}`) }},
	{name: "bytea-json-file-and-discard", column: "bytea", value: `convert_to('{"pad": "' || repeat('x', %[1]d) || '"}', 'UTF8')`, discard: true,
		want: func(n int) []byte { return []byte(`"payload":{"pad": "` + string(bytes.Repeat([]byte("x"), n)) + `"}`) }},
	{name: "bytea-binary-file", column: "bytea", value: `decode(repeat('ab', %[1]d), 'hex')`,
		want: func(n int) []byte { return []byte(`"payload":"q6ur`) }},
}

// relayBigMessage relays one message of c, of about n bytes, through a
// cdc run process and returns the process's peak RSS (VmHWM) once it was
// streaming, and once the message was delivered (the file holds its line,
// and the slot is confirmed past it: every sink acknowledged it).
func relayBigMessage(t *testing.T, c bigMsgCase, n int) (idle, peak int64) {
	url := pgtest.NamedCluster(t, "bigmsg", pgtest.Options{}).URL("postgres") // its 50 MB messages stay out of the shared cluster's WAL senders
	ob := relaytest.NewOutbox(t, url)
	if c.column != "" {
		pgtest.Exec(t, url, fmt.Sprintf("ALTER TABLE %s ALTER COLUMN payload TYPE %s USING convert_to(payload::text, 'UTF8')", ob.Table, c.column))
	}
	out := filepath.Join(t.TempDir(), "out.jsonl")
	sinks := fmt.Sprintf("  - {name: out, kind: file, path: %s, fsync: true}", out)
	if c.discard {
		sinks += "\n  - {name: none, kind: discard}"
	}
	cfg := ob.Config(t, sinks, "")
	// The message as the server sends it (bytea as hex) under the limit.
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	limit := min(4*n+1<<20, 1<<30)
	if err := os.WriteFile(cfg, []byte(strings.Replace(string(b), "postgres:\n", fmt.Sprintf("postgres:\n  max_message_bytes: %d\n", limit), 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	cdcInit(t, cfg)
	p := startCDC(t, "run", "--config", cfg)
	if !pgtest.WaitFor(30*time.Second, func() bool { return bytes.Contains([]byte(p.Stderr.String()), []byte(`"message":"streaming"`)) }) {
		t.Fatalf("the relay did not start streaming:\n%s", p.Stderr.String())
	}
	idle = peakRSS(p.Cmd.Process.Pid)

	conn := pgtest.Connect(t, url)
	ctx := context.Background()
	if _, err := conn.Exec(ctx, fmt.Sprintf("INSERT INTO %s (id, type, payload) VALUES (gen_random_uuid(), 'big', %s)", ob.Table, fmt.Sprintf(c.value, n))); err != nil {
		t.Fatal(err)
	}
	var s string
	if err := conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&s); err != nil {
		t.Fatal(err)
	}
	end := relaytest.ParseLSN(t, s)
	delivered := func() bool {
		return fileEndsWithLine(out) && relaytest.SlotConfirmed(t, conn, ob.Slot) >= end
	}
	if !pgtest.WaitFor(120*time.Second, delivered) {
		t.Fatalf("the message was not delivered in 120 s\n%s", p.Stderr.String())
	}
	peak = peakRSS(p.Cmd.Process.Pid)
	b, err = os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if want := c.want(n); bytes.Count(b, []byte("\n")) != 1 || !bytes.Contains(b, want) {
		t.Fatalf("the file (%d bytes) is not one line holding the payload (%d bytes)", len(b), len(want))
	}
	return idle, peak
}

// fileEndsWithLine reports whether the file at path is not empty and ends
// with a newline.
func fileEndsWithLine(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size() == 0 {
		return false
	}
	var b [1]byte
	_, err = f.ReadAt(b[:], fi.Size()-1)
	return err == nil && b[0] == '\n'
}

// TestIntegrationBigMessageCostsAboutTwiceItsSize: relaying one 50 MB
// message to a file (fsync on) and to discard costs the relay at most
// twice the size of the message as the server sends it, plus 16 MB
// (invariant 5; README "Guarantees", 5): for jsonb twice the payload's
// size, for bytea, whose text form is hex, four times. The cost is the
// peak RSS once delivered less the peak RSS once streaming, before it:
// that one is mostly the executable's pages (RssFile: about 31 MB of
// cdc, 37 MB of this test binary, which carries the tests' brokers too;
// 7-9 MB of heap), which a total bound of 2x + 50 MB left a few hundred
// kilobytes of room for, and failed on under load. The bench bounds the
// cdc binary's total (BENCHMARKS.md, "one 50 MiB message"). Measured:
// jsonb about 2.0x the payload, bytea about 4.0x. WALPOST_BIGMSG_MB sets
// another size.
func TestIntegrationBigMessageCostsAboutTwiceItsSize(t *testing.T) {
	t.Parallel()
	n := bigMsgSize(t)
	for _, c := range bigMsgCases {
		t.Run(c.name, func(t *testing.T) {
			idle, peak := relayBigMessage(t, c, n)
			t.Logf("%s: %d MB message: relay peak RSS %.1f MB, %.1f MB before it: the message cost %.2f× its payload",
				c.name, n>>20, float64(peak)/(1<<20), float64(idle)/(1<<20), float64(peak-idle)/float64(n))
			wire := int64(n)
			if c.column == "bytea" {
				wire = 2 * int64(n) // \x and two hex digits a byte
			}
			if limit := 2*wire + 16<<20; peak-idle > limit {
				t.Fatalf("the message cost %.1f MB (peak RSS %.1f MB less %.1f MB before it), want at most %d MB (twice the %d MB the server sends, plus 16 MB)",
					float64(peak-idle)/(1<<20), float64(peak)/(1<<20), float64(idle)/(1<<20), limit>>20, wire>>20)
			}
		})
	}
}
