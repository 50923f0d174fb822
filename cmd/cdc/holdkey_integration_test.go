package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/internal/ops"
	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/relaytest"
)

// holdRows builds n messages over keys interleaved round-robin ("k0",
// "k1", ...), numbered from first.
func holdRows(n, keys, first int) []relaytest.Msg {
	msgs := make([]relaytest.Msg, n)
	for i := range msgs {
		msgs[i] = relaytest.NewMsg("order.event", fmt.Sprintf("k%d", (first+i)%keys), first+i)
	}
	return msgs
}

// insertHeldTest writes msgs in transactions of 10; a message whose id is
// in bad is written with an empty type, a row the relay cannot map.
func insertHeldTest(t *testing.T, ob relaytest.Outbox, conn *pgx.Conn, msgs []relaytest.Msg, bad map[string]bool) {
	t.Helper()
	ctx := context.Background()
	for len(msgs) > 0 {
		n := min(10, len(msgs))
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			for _, m := range msgs[:n] {
				if bad[m.ID] {
					if _, err := tx.Exec(ctx, "INSERT INTO "+ob.Table+" (id, type, key, payload) VALUES ($1, '', $2, $3)", m.ID, m.Key, m.Payload); err != nil {
						return err
					}
					continue
				}
				if err := ob.Insert(ctx, tx, m); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		msgs = msgs[n:]
	}
}

// takenOf is how many messages of key the endpoint took (resends
// included).
func takenOf(e *laneEndpoint, key string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.taken[key])
}

// statusHeld runs cdc status --json and returns its held_keys.
func statusHeld(t *testing.T, cfg string) []ops.HeldKey {
	t.Helper()
	_, stdout, stderr := cdc(t, nil, "status", "--json", "--config", cfg)
	var st struct {
		HeldKeys []ops.HeldKey `json:"held_keys"`
	}
	if err := json.Unmarshal([]byte(stdout), &st); err != nil {
		t.Fatalf("cdc status --json: %v\n%s%s", err, stdout, stderr)
	}
	return st.HeldKeys
}

// holdSetup is what the hold_key tests share: an outbox whose one sink is
// a webhook to handler with concurrency lanes, its dead-letter table, and
// the slot made by cdc init.
type holdSetup struct {
	url, cfg, dlq string
	ob            relaytest.Outbox
	conn          *pgx.Conn
}

// newHoldSetup makes it; extra is the config's other sections (relay:...).
func newHoldSetup(t *testing.T, handler http.Handler, concurrency int, extra string) holdSetup {
	t.Helper()
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	cfg := ob.Config(t, fmt.Sprintf("  - {name: hook, kind: webhook, url: %q, concurrency: %d, timeout: 5s}", srv.URL+"/hook", concurrency), extra)
	dlq := relaytest.WithDeadLetterTable(t, url, cfg)
	cdcInit(t, cfg)
	return holdSetup{url: url, cfg: cfg, dlq: dlq, ob: ob, conn: pgtest.Connect(t, url)}
}

// TestIntegrationHoldKeyParksABadRowsKeyUntilResent: with on_invalid:
// hold_key, the cdc binary relays 8 interleaved keys to a webhook that
// takes 20 ms per request (concurrency 8, some requests failed once); a
// row of key k3 cannot be mapped. Every other key is delivered in full
// while k3 stops before the bad row; cdc status, /metrics and the log
// show the held key; the relay is killed with SIGKILL while k3 is held
// and more rows of every key are written: after the restart the other
// keys flow and k3 stays held. With the row fixed in the dead-letter
// table, cdc dead-letter resend of it delivers it and then k3's held
// messages in WAL order, and k3's next rows flow again, after them.
func TestIntegrationHoldKeyParksABadRowsKeyUntilResent(t *testing.T) {
	t.Parallel()
	e := newLaneEndpoint(20 * time.Millisecond)
	port, err := pgtest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	hs := newHoldSetup(t, e, 8, fmt.Sprintf("relay: {on_invalid: hold_key}\nhttp: {listen: '%s'}", addr))
	url, ob, cfg, dlq, conn := hs.url, hs.ob, hs.cfg, hs.dlq, hs.conn

	const keys = 8
	first := holdRows(240, keys, 0) // 30 a key
	badMsg := &first[8*10+3]        // k3's 11th message
	badMsg.Type = "fixed"           // as it will be resent
	bad := map[string]bool{badMsg.ID: true}
	e.expect(first)
	insertHeldTest(t, ob, conn, first, bad)

	relay := startCDC(t, "run", "--config", cfg)
	// Every key but k3 in full, k3 up to the bad row.
	if !pgtest.WaitFor(60*time.Second, func() bool { return e.delivered() >= 240-20 }) {
		t.Fatalf("%d of 220 messages delivered\n%s", e.delivered(), relay.Stderr.String())
	}
	time.Sleep(300 * time.Millisecond) // anything k3 would wrongly get
	if n := e.delivered(); n != 220 {
		t.Fatalf("%d messages delivered, want 220: every key but k3 in full, k3 before its bad row", n)
	}
	if got := takenOf(e, "k3"); got != 10 {
		t.Fatalf("k3: %d messages taken, want its 10 before the bad row", got)
	}
	held := statusHeld(t, cfg)
	if len(held) != 1 || held[0].Key != "k3" || held[0].Sink != "" || held[0].HeadID != badMsg.ID || held[0].Messages != 20 {
		t.Fatalf("cdc status held_keys %+v, want k3 for every sink, behind %s, 20 parked", held, badMsg.ID)
	}
	_, _, metrics := get(t, addr, "/metrics", "")
	if v := metricValue(metrics, `walpost_held_keys{sink="-"}`); v != 1 {
		t.Errorf("walpost_held_keys{sink=\"-\"} = %v, want 1\n%s", v, grepLines(metrics, "held"))
	}
	if v := metricValue(metrics, `walpost_held_messages_total{sink="-"}`); v != 19 {
		t.Errorf("walpost_held_messages_total{sink=\"-\"} = %v, want 19", v)
	}
	if !strings.Contains(relay.Stderr.String(), "its key is held") {
		t.Errorf("the log does not say the key is held:\n%s", relay.Stderr.String())
	}

	// kill -9 while k3 is held; more rows of every key meanwhile.
	relay.Kill9(t)
	second := holdRows(80, keys, 240)
	e.expect(second)
	insertHeldTest(t, ob, conn, second, nil)
	relay = startCDC(t, "run", "--config", cfg)
	if !pgtest.WaitFor(60*time.Second, func() bool { return e.delivered() >= 220+70 }) {
		t.Fatalf("after the restart %d of 290 messages delivered\n%s", e.delivered(), relay.Stderr.String())
	}
	time.Sleep(300 * time.Millisecond)
	if got := takenOf(e, "k3"); got != 10 {
		t.Fatalf("k3 after the restart: %d messages taken, want still 10", got)
	}
	if held = statusHeld(t, cfg); len(held) != 1 || held[0].Messages != 30 {
		t.Fatalf("cdc status held_keys after the restart %+v, want k3 with 30 parked", held)
	}

	// Resend before the fix fails and releases nothing.
	code, stdout, _ := cdc(t, nil, "dead-letter", "--config", cfg, "resend", badMsg.ID)
	if code != 1 || !strings.Contains(stdout, "failed  "+badMsg.ID) || takenOf(e, "k3") != 10 {
		t.Fatalf("resend of the unfixed row: exit %d, k3 taken %d\n%s", code, takenOf(e, "k3"), stdout)
	}
	// A held message that is not the head names the head.
	heldID := first[11*8+3].ID // k3's 12th, held behind the bad row
	code, stdout, _ = cdc(t, nil, "dead-letter", "--config", cfg, "resend", heldID)
	if code != 1 || !strings.Contains(stdout, "resend or drop that one") || !strings.Contains(stdout, badMsg.ID) {
		t.Fatalf("resend of a held message that is not the head: exit %d\n%s", code, stdout)
	}

	// Fix the row; resend it while the relay runs and k3 keeps coming.
	pgtest.Exec(t, url, fmt.Sprintf(`UPDATE %s SET row_data = jsonb_set(row_data, '{type}', '"fixed"') WHERE message_id = '%s'`, dlq, badMsg.ID))
	third := holdRows(40, keys, 320)
	e.expect(third)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c := pgtest.Connect(t, url)
		for i := 0; i < len(third); i += 8 {
			insertHeldTest(t, ob, c, third[i:i+8], nil)
			time.Sleep(20 * time.Millisecond)
		}
	}()
	code, stdout, stderr := cdc(t, nil, "dead-letter", "--config", cfg, "resend", badMsg.ID)
	if code != 0 || !strings.HasPrefix(stdout, "resent  "+badMsg.ID) {
		t.Fatalf("resend of the fixed row: exit %d\n%s%s", code, stdout, stderr)
	}
	wg.Wait()
	if !pgtest.WaitFor(60*time.Second, func() bool { return e.delivered() == 360 }) {
		t.Fatalf("%d of 360 messages delivered after the resend\n%s", e.delivered(), relay.Stderr.String())
	}
	if held = statusHeld(t, cfg); len(held) != 0 {
		t.Fatalf("cdc status held_keys after the resend %+v, want none", held)
	}
	relay.Stop(t)

	dups := e.checkKeyOrder(t)
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.strangers) > 0 {
		t.Errorf("%d requests for messages never inserted or with another key, first %q", len(e.strangers), e.strangers[0])
	}
	if e.overlaps > 0 {
		t.Errorf("%d requests came while another of their key was at the endpoint", e.overlaps)
	}
	t.Logf("k3 arrivals %v; %d duplicates", e.taken["k3"], dups)
}

// poisonHook wraps a laneEndpoint: while poison is on it answers 400 (a
// refusal for good) to the ids in refuse, which never reach the endpoint.
type poisonHook struct {
	*laneEndpoint
	mu     sync.Mutex
	poison bool
	refuse map[string]bool
}

func (p *poisonHook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	refuse := p.poison && p.refuse[r.Header.Get("X-Message-Id")]
	p.mu.Unlock()
	if refuse {
		http.Error(w, "poison", http.StatusBadRequest)
		return
	}
	p.laneEndpoint.ServeHTTP(w, r)
}

// TestIntegrationHoldKeyOnRefusedResendAndDrop: with on_refused:
// hold_key, a webhook refuses (400) one message of k1 and one of k2; the
// other keys are delivered in full while k1 and k2 stop at them. cdc
// dead-letter resend of k1's refused message, once the webhook takes it,
// delivers it and k1's held messages in order; drop of k2's drops it and
// delivers k2's held messages in order; both keys then flow again.
func TestIntegrationHoldKeyOnRefusedResendAndDrop(t *testing.T) {
	t.Parallel()
	hook := &poisonHook{laneEndpoint: newLaneEndpoint(5 * time.Millisecond), poison: true, refuse: map[string]bool{}}
	hs := newHoldSetup(t, hook, 4, "relay: {on_refused: hold_key, refused_attempts: 1}")
	ob, cfg, conn := hs.ob, hs.cfg, hs.conn

	const keys = 5
	msgs := holdRows(100, keys, 0) // 20 a key
	r1, r2 := msgs[5*5+1], msgs[5*7+2]
	hook.refuse[r1.ID], hook.refuse[r2.ID] = true, true
	var expected []relaytest.Msg // r2 is dropped: never delivered
	for _, m := range msgs {
		if m.ID != r2.ID {
			expected = append(expected, m)
		}
	}
	hook.expect(expected)
	insertHeldTest(t, ob, conn, msgs, nil)

	relay := startCDC(t, "run", "--config", cfg)
	// k0, k3, k4 in full; k1 before its 6th; k2 before its 8th.
	want := 60 + 5 + 7
	if !pgtest.WaitFor(60*time.Second, func() bool { return hook.delivered() >= want }) {
		t.Fatalf("%d of %d messages delivered\n%s", hook.delivered(), want, relay.Stderr.String())
	}
	time.Sleep(300 * time.Millisecond)
	if n, k1, k2 := hook.delivered(), takenOf(hook.laneEndpoint, "k1"), takenOf(hook.laneEndpoint, "k2"); n != want || k1 != 5 || k2 != 7 {
		t.Fatalf("%d delivered (k1 %d, k2 %d), want %d (k1 5, k2 7)", n, k1, k2, want)
	}
	held := statusHeld(t, cfg)
	if len(held) != 2 || held[0].Sink != "hook" || held[0].Key != "k1" || held[0].Messages != 15 || held[1].Key != "k2" || held[1].Messages != 13 {
		t.Fatalf("cdc status held_keys %+v, want k1 (15 parked) and k2 (13) for sink hook", held)
	}

	hook.mu.Lock()
	hook.poison = false
	hook.mu.Unlock()
	code, stdout, stderr := cdc(t, nil, "dead-letter", "--config", cfg, "resend", r1.ID)
	if code != 0 || strings.Count(stdout, "resent  ") != 15 {
		t.Fatalf("resend of k1's refused message: exit %d, want 15 resent\n%s%s", code, stdout, stderr)
	}
	code, stdout, stderr = cdc(t, nil, "dead-letter", "--config", cfg, "drop", r2.ID)
	if code != 0 || strings.Count(stdout, "resent  ") != 12 || !strings.Contains(stdout, "dropped "+r2.ID) || !strings.Contains(stdout, `key "k2" released`) {
		t.Fatalf("drop of k2's refused message: exit %d, want it dropped and 12 resent\n%s%s", code, stdout, stderr)
	}
	more := holdRows(20, keys, 100)
	hook.expect(more)
	insertHeldTest(t, ob, conn, more, nil)
	if !pgtest.WaitFor(60*time.Second, func() bool { return hook.delivered() == 119 }) {
		t.Fatalf("%d of 119 messages delivered\n%s", hook.delivered(), relay.Stderr.String())
	}
	if held = statusHeld(t, cfg); len(held) != 0 {
		t.Fatalf("cdc status held_keys after the release %+v, want none", held)
	}
	relay.Stop(t)
	hook.checkKeyOrder(t)
	if len(hook.strangers) > 0 {
		t.Errorf("requests for messages never expected: %q", hook.strangers)
	}
}

// TestIntegrationHoldKeyResendAllReleasesEveryKeyInOrder: bad rows in two
// keys, one of them with a second bad row while it is held; cdc
// dead-letter resend --all stops each key at a row still bad (reporting
// it, exit 1) and delivers nothing of it past that row; once every bad
// row is fixed, resend --all releases both keys, each in WAL order.
func TestIntegrationHoldKeyResendAllReleasesEveryKeyInOrder(t *testing.T) {
	t.Parallel()
	e := newLaneEndpoint(5 * time.Millisecond)
	hs := newHoldSetup(t, e, 4, "relay: {on_invalid: hold_key}")
	url, ob, cfg, dlq, conn := hs.url, hs.ob, hs.cfg, hs.dlq, hs.conn

	const keys = 4
	msgs := holdRows(80, keys, 0) // 20 a key
	bad := map[string]bool{}
	for _, i := range []int{4*3 + 1, 4*5 + 2, 4*9 + 1} { // k1's 4th and 10th, k2's 6th
		msgs[i].Type = "fixed"
		bad[msgs[i].ID] = true
	}
	e.expect(msgs)
	insertHeldTest(t, ob, conn, msgs, bad)
	relay := startCDC(t, "run", "--config", cfg)
	want := 40 + 3 + 5 // k0 and k3 in full, k1 before its 4th, k2 before its 6th
	if !pgtest.WaitFor(60*time.Second, func() bool { return e.delivered() >= want }) {
		t.Fatalf("%d of %d delivered\n%s", e.delivered(), want, relay.Stderr.String())
	}
	time.Sleep(300 * time.Millisecond)
	if n := e.delivered(); n != want {
		t.Fatalf("%d delivered, want %d", n, want)
	}
	if held := statusHeld(t, cfg); len(held) != 2 || held[0].Key != "k1" || held[0].Messages != 17 || held[1].Key != "k2" || held[1].Messages != 15 {
		t.Fatalf("held keys %+v, want k1 (17 parked) and k2 (15)", held)
	}

	// Fix only k1's first bad row and k2's: k1 stops again at its second.
	fix := func(id string) {
		pgtest.Exec(t, url, fmt.Sprintf(`UPDATE %s SET row_data = jsonb_set(row_data, '{type}', '"fixed"') WHERE message_id = '%s'`, dlq, id))
	}
	fix(msgs[4*3+1].ID)
	fix(msgs[4*5+2].ID)
	code, stdout, _ := cdc(t, nil, "dead-letter", "--config", cfg, "resend", "--all")
	if code != 1 || !strings.Contains(stdout, "failed  "+msgs[4*9+1].ID) {
		t.Fatalf("resend --all with k1's second bad row unfixed: exit %d, want 1 naming it\n%s", code, stdout)
	}
	if !pgtest.WaitFor(30*time.Second, func() bool { return takenOf(e, "k2") == 20 }) || takenOf(e, "k1") != 9 {
		t.Fatalf("after the first resend: k1 %d taken (want 9, up to its second bad row), k2 %d (want 20)", takenOf(e, "k1"), takenOf(e, "k2"))
	}
	if held := statusHeld(t, cfg); len(held) != 1 || held[0].Key != "k1" || held[0].HeadID != msgs[4*9+1].ID || held[0].Messages != 11 {
		t.Fatalf("held keys %+v, want k1 behind its second bad row with 11 parked", held)
	}
	fix(msgs[4*9+1].ID)
	if code, stdout, stderr := cdc(t, nil, "dead-letter", "--config", cfg, "resend", "--all"); code != 0 {
		t.Fatalf("resend --all with every row fixed: exit %d\n%s%s", code, stdout, stderr)
	}
	if !pgtest.WaitFor(30*time.Second, func() bool { return e.delivered() == 80 }) {
		t.Fatalf("%d of 80 delivered", e.delivered())
	}
	relay.Stop(t)
	e.checkKeyOrder(t)
	if held := statusHeld(t, cfg); len(held) != 0 {
		t.Fatalf("held keys %+v after the release", held)
	}
}

// TestIntegrationHoldKeyHoldsTheRestOfItsKeyInOneCopy: one COPY, whose
// rows share WAL positions, holds a bad row of k3; the rows of k3 after it
// in the same COPY (same LSN, later seq) are held behind it, those before
// it and every other key delivered; after the fix, resend delivers k3 in
// order.
func TestIntegrationHoldKeyHoldsTheRestOfItsKeyInOneCopy(t *testing.T) {
	t.Parallel()
	e := newLaneEndpoint(2 * time.Millisecond)
	hs := newHoldSetup(t, e, 4, "relay: {on_invalid: hold_key}")
	msgs := copyMsgs(200) // over 7 keys: k3 is 3, 10, 17, ...
	expected := slices.Clone(msgs)
	expected[10].Type = "fixed"
	e.expect(expected)
	msgs[10].Type = ""
	hs.ob.CopyTx(t, hs.conn, msgs...)
	requireSharedLSNs(t, hs.ob, len(msgs))

	relay := startCDC(t, "run", "--config", hs.cfg)
	k3 := (200 + 7 - 1 - 3) / 7 // rows of k3
	want := 200 - (k3 - 1)      // all but k3 from its second row on
	if !pgtest.WaitFor(60*time.Second, func() bool { return e.delivered() >= want }) {
		t.Fatalf("%d of %d delivered\n%s", e.delivered(), want, relay.Stderr.String())
	}
	time.Sleep(300 * time.Millisecond)
	if n, got := e.delivered(), takenOf(e, "k3"); n != want || got != 1 {
		t.Fatalf("%d delivered (k3 %d), want %d (k3 only its row before the bad one)", n, got, want)
	}
	if held := statusHeld(t, hs.cfg); len(held) != 1 || held[0].Key != "k3" || held[0].Messages != k3-1 {
		t.Fatalf("held keys %+v, want k3 with %d parked", held, k3-1)
	}
	pgtest.Exec(t, hs.url, fmt.Sprintf(`UPDATE %s SET row_data = jsonb_set(row_data, '{type}', '"fixed"') WHERE message_id = '%s'`, hs.dlq, msgs[10].ID))
	if code, stdout, stderr := cdc(t, nil, "dead-letter", "--config", hs.cfg, "resend", msgs[10].ID); code != 0 || strings.Count(stdout, "resent  ") != k3-1 {
		t.Fatalf("resend: exit %d, want %d resent\n%s%s", code, k3-1, stdout, stderr)
	}
	if !pgtest.WaitFor(30*time.Second, func() bool { return e.delivered() == 200 }) {
		t.Fatalf("%d of 200 delivered after the resend", e.delivered())
	}
	relay.Stop(t)
	e.checkKeyOrder(t)
}
