package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/relaytest"
)

// recHook is a webhook endpoint that records the id, type and body of
// every request it answers 2xx, in arrival order, answers 400 to a body
// holding "poison" while poison is set, and runs onMessage (if set) with
// the count of accepted requests. Safe for concurrent use.
type recHook struct {
	poison    atomic.Bool
	onMessage func(n int)

	mu      sync.Mutex
	ids     []string
	types   []string
	bodies  map[string][]string // by id, every body received (refused ones too)
	refused int
}

func newRecHook(t *testing.T) (*recHook, string) {
	h := &recHook{bodies: map[string][]string{}}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return h, srv.URL + "/hook"
}

func (h *recHook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	id := r.Header.Get("X-Message-Id")
	h.mu.Lock()
	h.bodies[id] = append(h.bodies[id], string(body))
	if h.poison.Load() && strings.Contains(string(body), "poison") {
		h.refused++
		h.mu.Unlock()
		http.Error(w, "poison refused for the test", http.StatusBadRequest)
		return
	}
	h.ids = append(h.ids, id)
	h.types = append(h.types, r.Header.Get("X-Message-Type"))
	n := len(h.ids)
	h.mu.Unlock()
	if h.onMessage != nil {
		h.onMessage(n)
	}
	w.WriteHeader(http.StatusOK)
}

func (h *recHook) got() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.ids)
}

func (h *recHook) bodiesOf(id string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.bodies[id])
}

func idsOf(lines []relaytest.Line) []string {
	ids := make([]string, len(lines))
	for i, l := range lines {
		ids[i] = l.ID
	}
	return ids
}

// TestIntegrationReplayDeliversTheSameIdsInOrderWhileTheRelayRuns: while a
// relay streams the slot to its own file sink, cdc replay (another config
// on the same slot and table, two file sinks, one routed to b.* only)
// publishes every row again with its id, type, key, payload and headers,
// in created_at, id order (the default table's time column), each
// to the sinks its route takes; with --sink and --from-id/--to-id only
// that sink gets only that range. The relay neither stops nor gets a
// message twice, and the slot is untouched by replay.
func TestIntegrationReplayDeliversTheSameIdsInOrderWhileTheRelayRuns(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	dir := t.TempDir()
	live, all, onlyB := filepath.Join(dir, "live.jsonl"), filepath.Join(dir, "all.jsonl"), filepath.Join(dir, "b.jsonl")
	relayCfg := ob.Config(t, fmt.Sprintf("  - {name: live, kind: file, path: %s}", live), "")
	replayCfg := ob.Config(t, fmt.Sprintf("  - {name: all, kind: file, path: %s}\n  - {name: onlyb, kind: file, path: %s, route: {include: [\"b.*\"]}}", all, onlyB), "")
	cdcInit(t, relayCfg)
	relay := startCDC(t, "run", "--config", relayCfg)
	conn := pgtest.Connect(t, url)
	var msgs []relaytest.Msg
	for tx := range 4 {
		var batch []relaytest.Msg
		for i := range 8 {
			typ := []string{"a.x", "b.x"}[i%2]
			m := relaytest.NewMsg(typ, fmt.Sprintf("k%d", i%3), tx*8+i)
			m.Headers = map[string]string{"seq": fmt.Sprintf("%d.%d", tx, i)}
			batch = append(batch, m)
		}
		ob.InsertTx(t, conn, batch...)
		msgs = append(msgs, batch...)
	}
	streamed := relaytest.WaitAllDelivered(t, live, msgs, 60*time.Second, relay.Stderr.String)
	slotBefore := relaytest.SlotConfirmed(t, conn, ob.Slot)

	code, _, stderr := cdc(t, nil, "replay", "--config", replayCfg, "--since", "1h", "--batch", "7")
	if code != 0 || !strings.Contains(stderr, "32/32 rows") {
		t.Fatalf("cdc replay: exit %d, want 0 and progress 32/32:\n%s", code, stderr)
	}
	wantIDs := make([]string, len(msgs))
	var wantB []string
	for i, m := range msgs {
		wantIDs[i] = m.ID
		if strings.HasPrefix(m.Type, "b.") {
			wantB = append(wantB, m.ID)
		}
	}
	got := relaytest.ReadLines(t, all)
	if !slices.Equal(idsOf(got), wantIDs) {
		t.Fatalf("replayed to all: %v\nwant the committed ids in order: %v", idsOf(got), wantIDs)
	}
	byID := map[string]relaytest.Line{}
	for _, l := range streamed {
		byID[l.ID] = l
	}
	for _, l := range got {
		s := byID[l.ID]
		if l.Type != s.Type || keyOf(l) != keyOf(s) || string(l.Payload) != string(s.Payload) || fmt.Sprint(l.Headers) != fmt.Sprint(s.Headers) {
			t.Errorf("replayed %+v\nstreamed %+v", l, s)
		}
	}
	if ids := idsOf(relaytest.ReadLines(t, onlyB)); !slices.Equal(ids, wantB) {
		t.Fatalf("replayed to onlyb (route b.*): %v, want %v", ids, wantB)
	}

	// One sink, a range of ids.
	code, _, stderr = cdc(t, nil, "replay", "--config", replayCfg, "--sink", "onlyb", "--from-id", msgs[5].ID, "--to-id", msgs[20].ID)
	if code != 0 {
		t.Fatalf("cdc replay --sink onlyb: exit %d\n%s", code, stderr)
	}
	var wantRange []string
	for _, m := range msgs[5:21] {
		if strings.HasPrefix(m.Type, "b.") {
			wantRange = append(wantRange, m.ID)
		}
	}
	if ids := idsOf(relaytest.ReadLines(t, onlyB)); !slices.Equal(ids, append(slices.Clone(wantB), wantRange...)) {
		t.Fatalf("onlyb after --sink onlyb --from-id --to-id: %v, want %v then %v", ids, wantB, wantRange)
	}
	if n := len(relaytest.ReadLines(t, all)); n != len(msgs) {
		t.Fatalf("--sink onlyb wrote to all too: %d lines, want %d", n, len(msgs))
	}
	if relay.Exited() {
		t.Fatalf("the relay stopped during replay:\n%s", relay.Stderr.String())
	}
	if n := len(relaytest.ReadLines(t, live)); n != len(msgs) {
		t.Fatalf("the relay's sink has %d lines, want %d (replay must not touch the slot)", n, len(msgs))
	}
	if after := relaytest.SlotConfirmed(t, conn, ob.Slot); after < slotBefore {
		t.Fatalf("the slot went back from %s to %s", slotBefore, after)
	}
	// A range of ids not in the table.
	if code, _, stderr = cdc(t, nil, "replay", "--config", replayCfg, "--from-id", "00000000-0000-4000-8000-000000000000"); code != 1 || !strings.Contains(stderr, "no row of") {
		t.Fatalf("replay --from-id of no row: exit %d, want 1 naming it:\n%s", code, stderr)
	}
}

// TestIntegrationReplayInterruptedStopsAfterTheBatchInFlight: SIGINT in
// the middle of a replay finishes the batch in flight, exits 130 and
// prints how to go on; the printed command replays exactly the rest, so
// the two runs together deliver every id once, in order.
func TestIntegrationReplayInterruptedStopsAfterTheBatchInFlight(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	hook, hookURL := newRecHook(t)
	cfg := ob.Config(t, fmt.Sprintf("  - {name: hook, kind: webhook, url: %q, timeout: 5s}", hookURL), "")
	cdcInit(t, cfg)
	conn := pgtest.Connect(t, url)
	var msgs []relaytest.Msg
	for i := range 40 {
		msgs = append(msgs, relaytest.NewMsg("t", "k", i))
	}
	ob.InsertTx(t, conn, msgs...)

	var p *proc
	started := make(chan struct{})
	hook.onMessage = func(n int) {
		if n == 12 { // in the third batch of 5
			<-started
			p.Cmd.Process.Signal(syscall.SIGINT)
			// Answer only once cdc took the signal: otherwise, on a busy
			// machine, the batch could end (three more fast requests)
			// and the next start before the signal is handled.
			if !pgtest.WaitFor(10*time.Second, func() bool {
				return strings.Contains(p.Stderr.String(), "replay: interrupted: stopping after the batch in flight")
			}) {
				t.Errorf("cdc replay did not say it took SIGINT:\n%s", p.Stderr.String())
			}
		}
	}
	p = startCDC(t, "replay", "--config", cfg, "--from-id", msgs[0].ID, "--batch", "5")
	close(started)
	if code := p.Wait(60 * time.Second); code != 130 {
		t.Fatalf("interrupted replay: exit %d, want 130\n%s", code, p.Stderr.String())
	}
	got := hook.got()
	if len(got) != 15 || !slices.Equal(got, idsOfMsgs(msgs[:15])) {
		t.Fatalf("interrupted in the third batch of 5: delivered %d %v, want the first 15 in order", len(got), got)
	}
	m := regexp.MustCompile(`to go on: cdc replay --config \S+ --from-id ([0-9a-f-]+) --to-id ([0-9a-f-]+)`).FindStringSubmatch(p.Stderr.String())
	if m == nil || m[1] != msgs[15].ID || m[2] != msgs[39].ID {
		t.Fatalf("the interrupted replay does not say how to go on from %s to %s:\n%s", msgs[15].ID, msgs[39].ID, p.Stderr.String())
	}
	hook.onMessage = nil
	if code, _, stderr := cdc(t, nil, "replay", "--config", cfg, "--from-id", m[1], "--to-id", m[2]); code != 0 {
		t.Fatalf("going on: exit %d\n%s", code, stderr)
	}
	if got := hook.got(); !slices.Equal(got, idsOfMsgs(msgs)) {
		t.Fatalf("both runs delivered %v, want every id once in order", got)
	}
}

func keyOf(l relaytest.Line) string {
	if l.Key == nil {
		return "<null>"
	}
	return *l.Key
}

func idsOfMsgs(msgs []relaytest.Msg) []string {
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	return ids
}

// parkedRow is one element of cdc dead-letter list --json.
type parkedRow struct {
	ID        *string         `json:"id"`
	LSN       string          `json:"lsn"`
	Seq       uint32          `json:"seq"`
	Sink      string          `json:"sink"`
	ResentAt  *time.Time      `json:"resent_at"`
	Error     string          `json:"error"`
	RowData   json.RawMessage `json:"row_data"`
	CommitLSN string          `json:"commit_lsn"`
}

func listParked(t *testing.T, cfg string) []parkedRow {
	t.Helper()
	code, stdout, stderr := cdc(t, nil, "dead-letter", "--config", cfg, "list", "--json")
	if code != 0 {
		t.Fatalf("dead-letter list --json: exit %d\n%s", code, stderr)
	}
	var rows []parkedRow
	if err := json.Unmarshal([]byte(stdout), &rows); err != nil {
		t.Fatalf("dead-letter list --json: %v\n%s", err, stdout)
	}
	return rows
}

// TestIntegrationReplayRefusesATableLessOutbox: with postgres.source:
// messages there is no table to read, so cdc replay says so and exits 2
// (a configuration error, nothing done) instead of reading postgres.table's
// default, public.outbox, a table of something else or none.
func TestIntegrationReplayRefusesATableLessOutbox(t *testing.T) {
	t.Parallel()
	_, _, out, cfg := messagesOutbox(t, "", "")
	code, _, stderr := cdc(t, nil, "replay", "--config", cfg, "--since", "1h")
	if code != 2 || !strings.Contains(stderr, "a table-less outbox (postgres.source: messages) keeps no rows to replay") ||
		!strings.Contains(stderr, "cdc dead-letter resend") || strings.Count(stderr, "\n") != 1 {
		t.Fatalf("cdc replay of a table-less outbox: exit %d, want 2 and one line saying it has no rows:\n%s", code, stderr)
	}
	if n := len(relaytest.ReadLines(t, out)); n != 0 {
		t.Fatalf("cdc replay of a table-less outbox published %d messages", n)
	}
}

// TestIntegrationReplayReadsByteaInHexWhateverTheDatabaseDefault: on a
// database whose bytea_output is escape (ALTER DATABASE … SET), replay
// still reads a bytea payload as the stream sends it: bytes that are not
// JSON go out as base64, JSON text as JSON, none as an invalid row.
func TestIntegrationReplayReadsByteaInHexWhateverTheDatabaseDefault(t *testing.T) {
	t.Parallel()
	base := pgtest.URL(t)
	db := pgtest.Name(t, "escdb")
	pgtest.Exec(t, base, "CREATE DATABASE "+db, "ALTER DATABASE "+db+" SET bytea_output = 'escape'")
	t.Cleanup(func() { pgtest.Exec(t, base, "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)") })
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + db
	binary, text := relaytest.NewMsg("bin", "k", 1), relaytest.NewMsg("text", "k", 2)
	pgtest.Exec(t, u.String(), "CREATE TABLE public.outbox_bytea (id uuid PRIMARY KEY, type text NOT NULL, key text, payload bytea NOT NULL, headers jsonb)",
		fmt.Sprintf(`INSERT INTO public.outbox_bytea (id, type, key, payload) VALUES ('%s', 'bin', 'k', '\x00ff7b'), ('%s', 'text', 'k', convert_to('{"a": 1}', 'UTF8'))`,
			binary.ID, text.ID))
	out := filepath.Join(t.TempDir(), "out.jsonl")
	cfg := filepath.Join(t.TempDir(), "cdc.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("postgres: {url: %q, table: public.outbox_bytea, publication: p, slot: s}\nsinks:\n  - {name: out, kind: file, path: %s}\n",
		u.String(), out)), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := cdc(t, nil, "replay", "--config", cfg, "--since", "1h")
	if code != 0 {
		t.Fatalf("cdc replay on a database with bytea_output = escape: exit %d, want 0\n%s", code, stderr)
	}
	lines := relaytest.ReadLines(t, out)
	if len(lines) != 2 || lines[0].ID != binary.ID || lines[0].PayloadEncoding != "base64" || string(lines[0].Payload) != `"AP97"` ||
		lines[1].ID != text.ID || lines[1].PayloadEncoding != "" || string(lines[1].Payload) != `{"a": 1}` {
		t.Fatalf("replayed %+v, want %s with base64 AP97 and %s with JSON {\"a\": 1}", lines, binary.ID, text.ID)
	}
}

// TestIntegrationReplaySinceReadsCreatedAtOfTheDefaultTable: on the
// default table (sql/outbox.sql) with random (UUIDv4) ids and no
// columns.time, cdc replay --since 2h selects the rows by created_at:
// exactly the rows of the last two hours, in created_at order, each with
// its created_at as its time (CloudEvents time).
func TestIntegrationReplaySinceReadsCreatedAtOfTheDefaultTable(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	cfg := ob.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s, format: cloudevents}", out), "")
	conn := pgtest.Connect(t, url)
	// Ids in the opposite order of the rows' times: created_at alone
	// tells which rows are recent.
	ids := []string{"ffffffff-0000-4000-8000-000000000000", "eeeeeeee-0000-4000-8000-000000000000",
		"dddddddd-0000-4000-8000-000000000000", "cccccccc-0000-4000-8000-000000000000"}
	ages := []string{"5 hours", "3 hours", "90 minutes", "1 minute"}
	for i, id := range ids {
		if _, err := conn.Exec(context.Background(), "INSERT INTO "+ob.Table+" (id, type, payload, created_at) VALUES ($1, 't', '{}', now() - $2::interval)", id, ages[i]); err != nil {
			t.Fatal(err)
		}
	}
	code, _, stderr := cdc(t, nil, "replay", "--config", cfg, "--since", "2h")
	if code != 0 || !strings.Contains(stderr, "2/2 rows") {
		t.Fatalf("cdc replay --since 2h on the default table: exit %d, want 0 and 2/2 rows:\n%s", code, stderr)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var events []struct {
		ID   string    `json:"id"`
		Time time.Time `json:"time"`
	}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var e struct {
			ID   string    `json:"id"`
			Time time.Time `json:"time"`
		}
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("%v: %s", err, l)
		}
		events = append(events, e)
	}
	if len(events) != 2 || events[0].ID != ids[2] || events[1].ID != ids[3] {
		t.Fatalf("replayed %+v, want %s then %s (the rows of the last 2 hours, in created_at order)", events, ids[2], ids[3])
	}
	for i, e := range events {
		var created time.Time
		if err := conn.QueryRow(context.Background(), "SELECT created_at FROM "+ob.Table+" WHERE id = $1", e.ID).Scan(&created); err != nil {
			t.Fatal(err)
		}
		if !e.Time.Equal(created) {
			t.Errorf("event %d (%s): time %v, want its created_at %v", i, e.ID, e.Time, created)
		}
	}
}
