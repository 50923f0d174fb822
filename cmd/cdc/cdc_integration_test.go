package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/relaytest"
)

// The test binary doubles as the cdc binary: with WALPOST_CDC_MAIN=1 it
// runs the command line instead of the tests, so the fault tests can kill -9
// a real relay process.
//
// The tests marked t.Parallel (each on its own outbox, slot and sinks, or
// a cluster of its own) run parallelTests at a time unless -parallel says
// otherwise: they wait for processes, servers and status intervals far
// more than they compute, so more of them than CPUs fit. The others run
// one after another, before them: those that change the shared cluster
// (ALTER SYSTEM) or load the CPUs on purpose, share the lost-slot
// cluster, bound how long something takes, need a stream without other
// relays' traffic (heartbeats), or set environment variables.
func TestMain(m *testing.M) {
	if os.Getenv("WALPOST_CDC_MAIN") == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		flag.Set("test.parallel", strconv.Itoa(parallelTests))
	}
	os.Exit(pgtest.Main(m))
}

// parallelTests is how many parallel tests run at once by default.
const parallelTests = 4

// proc is a cdc subprocess: the test binary running cdc's main.
type proc = relaytest.Proc

func startCDC(t *testing.T, args ...string) *proc {
	t.Helper()
	return startCDCEnv(t, nil, args...)
}

// startCDCEnv starts cdc with extra environment variables (KEY=value).
func startCDCEnv(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	return startCDCEnvOnly(t, append(os.Environ(), env...), args...)
}

// startCDCEnvOnly starts cdc with only the environment variables env.
func startCDCEnvOnly(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(env, "WALPOST_CDC_MAIN=1")
	return relaytest.Start(t, cmd)
}

// peakRSS reads VmHWM (peak resident set) of a running process, in bytes.
func peakRSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func cdcInit(t *testing.T, cfg string) {
	t.Helper()
	var out bytes.Buffer
	if code := run([]string{"init", "--config", cfg}, &out, &out); code != 0 {
		t.Fatalf("cdc init exited %d: %s", code, out.String())
	}
}

// TestIntegrationKill9MidTransactionLosesNothing: the relay is killed with
// SIGKILL while it streams a large transaction, more transactions commit
// while it is down, and after a restart every committed id is in the sink.
// Throughout, the slot's confirmed position never passes a transaction
// whose messages the sink does not hold (invariant 1, checked from
// outside).
func TestIntegrationKill9MidTransactionLosesNothing(t *testing.T) {
	t.Parallel()
	kill9MidTransaction(t, pgtest.URL(t))
}

// kill9MidTransaction is TestIntegrationKill9MidTransactionLosesNothing on
// the database at url (also run on every PostgreSQL version:
// TestIntegrationVersions).
func kill9MidTransaction(t *testing.T, url string) {
	ob := relaytest.NewOutbox(t, url)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	cfg := ob.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s}", out), "relay: {batch_size: 200}")
	cdcInit(t, cfg)
	conn := pgtest.Connect(t, url)

	// Samples of (confirmed LSN, ids in the file right after reading it).
	stopSampling := sampleSlot(t, url, ob.Slot, out)

	var all []relaytest.Msg
	batch := func(n int) []relaytest.Msg {
		msgs := make([]relaytest.Msg, n)
		for i := range msgs {
			msgs[i] = relaytest.NewMsg("big", fmt.Sprint(i%13), i)
		}
		return msgs
	}
	p := startCDC(t, "run", "--config", cfg)
	small := batch(100)
	ob.InsertTx(t, conn, small...)
	if !pgtest.WaitFor(60*time.Second, func() bool { return relaytest.CountLines(out) >= len(small) }) {
		t.Fatalf("relay did not get going: %d lines\n%s", relaytest.CountLines(out), p.Stderr.String())
	}
	st, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	lineBytes := st.Size() / int64(len(small))
	big := batch(60000)
	ob.InsertTx(t, conn, big...)
	all = append(append(all, small...), big...)
	// Kill while the big transaction is partly written to the sink: the
	// relay writes it in well under a second, so watch the file's size
	// closely (counting lines, or a slower poll, can miss the window on a
	// busy machine).
	deadline := time.Now().Add(60 * time.Second)
	for {
		if st, err := os.Stat(out); err == nil && st.Size() > lineBytes*(int64(len(small))+10000) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("relay did not get going: %d lines\n%s", relaytest.CountLines(out), p.Stderr.String())
		}
		time.Sleep(time.Millisecond)
	}
	p.Kill9(t)
	killedAt := relaytest.CountLines(out)
	// More writes while the relay is down.
	for i := 0; i < 20; i++ {
		m := batch(1 + i*10)
		ob.InsertTx(t, conn, m...)
		all = append(all, m...)
	}
	p = startCDC(t, "run", "--config", cfg)
	lines := relaytest.WaitAllDelivered(t, out, all, 120*time.Second, p.Stderr.String)
	if bad := stopSampling(); len(bad) > 0 {
		t.Fatal(bad[0])
	}
	if killedAt >= len(small)+len(big) {
		t.Fatalf("kill came after the big transaction was complete (%d lines): the test did not cut it", killedAt)
	}
	dups := len(lines) - len(all)
	t.Logf("killed at %d lines; %d duplicates after restart (at most what was in flight)", killedAt, dups)
	if dups > len(big) {
		t.Fatalf("%d duplicates: more than the transaction in flight", dups)
	}
	p.Stop(t) // graceful: exit 0
}

// TestIntegrationLargeTransactionHasBoundedMemory: one transaction of
// 200,000 outbox rows passes with the relay's peak RSS under 150 MB
// (invariant 5: memory bounded by the window, not by transaction size).
func TestIntegrationLargeTransactionHasBoundedMemory(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	cfg := ob.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s, fsync: false}", out), "")
	cdcInit(t, cfg)
	const n = 200_000
	pad := strings.Repeat("x", 250)
	pgtest.Exec(t, url, fmt.Sprintf(`INSERT INTO %s (id, type, key, payload)
		SELECT gen_random_uuid(), 'bulk', 'k' || (g %% 100), jsonb_build_object('n', g, 'pad', '%s') FROM generate_series(1, %d) g`, ob.Table, pad, n))
	p := startCDC(t, "run", "--config", cfg)
	var peak int64
	lines := relaytest.NewLineCounter(out)
	ok := pgtest.WaitFor(180*time.Second, func() bool {
		peak = max(peak, peakRSS(p.Cmd.Process.Pid))
		return lines.Count() >= n
	})
	peak = max(peak, peakRSS(p.Cmd.Process.Pid))
	if !ok {
		t.Fatalf("only %d of %d lines after 180s\n%s", relaytest.CountLines(out), n, p.Stderr.String())
	}
	t.Logf("200,000-row transaction: relay peak RSS %.1f MB", float64(peak)/(1<<20))
	if peak > 150<<20 {
		t.Fatalf("peak RSS %d MB, want under 150 MB", peak>>20)
	}
}

// TestConfigErrorsNameTheField: a typo in the config is a usage error
// (exit 2) naming the key, before anything connects.
func TestConfigErrorsNameTheField(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cases := []struct{ yaml, want string }{
		{"postgres: {url: 'postgres://x', slott: s}\nsinks: [{name: a, kind: stdout}]\n", `unknown key "slott"`},
		{"postgres: {url: 'postgres://x'}\nsinks: [{name: a, kind: file}]\n", "path: empty"},
		{"postgres: {url: 'postgres://x'}\nsinks: [{name: a, kind: stdout}, {name: a, kind: stdout}]\n", "sinks[1].name"},
		{"postgres: {url: 'postgres://x'}\nsinks: [{name: a, kind: carrier-pigeon}]\n", `sinks[0].kind: unknown kind "carrier-pigeon"`},
		{"postgres: {url: '${NO_SUCH_VAR_FOR_WALPOST}'}\nsinks: [{name: a, kind: stdout}]\n", "NO_SUCH_VAR_FOR_WALPOST is not set"},
	}
	for i, c := range cases {
		p := filepath.Join(dir, fmt.Sprintf("c%d.yaml", i))
		os.WriteFile(p, []byte(c.yaml), 0o644)
		var out bytes.Buffer
		code := run([]string{"run", "--config", p}, &out, &out)
		if code != 2 {
			t.Errorf("case %d: exit %d, want 2; output %s", i, code, out.String())
		}
		if code == 0 || !strings.Contains(out.String(), c.want) {
			t.Errorf("case %d: exit %d, output %q, want it to contain %q", i, code, out.String(), c.want)
		}
	}
}

// TestIntegrationStatusShowsTheSlot: cdc status prints the slot's state.
func TestIntegrationStatusShowsTheSlot(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	cfg := ob.Config(t, "  - {name: out, kind: stdout}", "")
	var out bytes.Buffer
	if code := run([]string{"status", "--config", cfg}, &out, &out); code != 1 || !strings.Contains(out.String(), "missing (run cdc init)") {
		t.Fatalf("status before init: exit %d: %s", code, out.String())
	}
	cdcInit(t, cfg)
	out.Reset()
	if code := run([]string{"status", "--config", cfg}, &out, &out); code != 0 {
		t.Fatalf("status exited %d: %s", code, out.String())
	}
	for _, want := range []string{"slot:          " + ob.Slot, "active:        no", "confirmed LSN: ", "lag:           "} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("status output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "dead letters") {
		t.Fatalf("status reports dead letters before any:\n%s", out.String())
	}

	// Parked messages of this slot are counted per sink.
	dlq := relaytest.WithDeadLetterTable(t, url, cfg)
	pgtest.Exec(t, url, "CREATE TABLE "+dlq+" (slot text, lsn pg_lsn, seq bigint DEFAULT 0, sink text, commit_lsn pg_lsn, message_id text, error text, row_data jsonb, resent_at timestamptz, hold_key text, held_behind text, PRIMARY KEY (slot, lsn, seq, sink))")
	pgtest.Exec(t, url, "INSERT INTO "+dlq+" (slot, lsn, sink) VALUES ('"+ob.Slot+"', '0/1', ''), ('"+ob.Slot+"', '0/2', 'out'), ('"+ob.Slot+"', '0/3', 'out'), ('other', '0/3', 'out')")
	out.Reset()
	if code := run([]string{"status", "--config", cfg}, &out, &out); code != 0 {
		t.Fatalf("status exited %d: %s", code, out.String())
	}
	if want := "dead letters:  3 in " + dlq + " (rows that could not be mapped: 1, refused by sink out: 2)"; !strings.Contains(out.String(), want) {
		t.Fatalf("status output lacks %q:\n%s", want, out.String())
	}
}
