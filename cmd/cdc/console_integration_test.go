package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/walpost/walpost/internal/console"
	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/relaytest"
	"github.com/walpost/walpost/outbox"
)

// Console tokens of the console tests (http.view_token, http.operate_token).
const consoleViewToken, consoleOperateToken = "view-token-0123456789", "operate-token-0123456789"

// consoleSetup is a relay with the console on (docs/operations.md,
// "Console") and relay.on_invalid: hold_key, streaming 4 interleaved
// keys to a webhook; the 4th message of k1 is a row it cannot map, so
// k1 is held behind it.
type consoleSetup struct {
	holdSetup
	e      *laneEndpoint
	addr   string // the HTTP listener
	source string // the console's name of the source: its slot
	relay  *proc
	bad    relaytest.Msg // the bad row, as it is once fixed
}

func newConsoleSetup(t *testing.T) *consoleSetup {
	t.Helper()
	e := newLaneEndpoint(2 * time.Millisecond)
	port, err := pgtest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	hs := newHoldSetup(t, e, 4, fmt.Sprintf("relay: {on_invalid: hold_key}\nhttp: {listen: '%s', console: true, view_token: %s, operate_token: %s}",
		addr, consoleViewToken, consoleOperateToken))
	msgs := holdRows(40, 4, 0) // 10 a key
	bad := &msgs[3*4+1]        // k1's 4th
	bad.Type = "fixed"         // as it will be released
	e.expect(msgs)
	insertHeldTest(t, hs.ob, hs.conn, msgs, map[string]bool{bad.ID: true})
	relay := startCDCEnv(t, []string{"CDC_CONSOLE_SAMPLE_EVERY=1s"}, "run", "--config", hs.cfg)
	// Every key but k1 in full, k1 up to its bad row.
	if !pgtest.WaitFor(60*time.Second, func() bool { return e.delivered() >= 33 }) {
		t.Fatalf("%d of 33 messages delivered\n%s", e.delivered(), relay.Logs())
	}
	if !pgtest.WaitFor(30*time.Second, func() bool { return len(statusHeld(t, hs.cfg)) == 1 }) {
		t.Fatalf("k1 is not held: %+v", statusHeld(t, hs.cfg))
	}
	return &consoleSetup{holdSetup: hs, e: e, addr: addr, source: slotOf(t, hs.cfg), relay: relay, bad: *bad}
}

// fixBadRow gives the bad row a type in the dead-letter table, as an
// operator would.
func (cs *consoleSetup) fixBadRow(t *testing.T) {
	t.Helper()
	pgtest.Exec(t, cs.url, fmt.Sprintf(`UPDATE %s SET row_data = jsonb_set(row_data, '{type}', '"fixed"') WHERE message_id = '%s'`, cs.dlq, cs.bad.ID))
}

// finish is flowAgain and check.
func (cs *consoleSetup) finish(t *testing.T) {
	t.Helper()
	cs.flowAgain(t)
	cs.check(t)
}

// flowAgain writes more rows of every key and waits for all 48 messages
// and for nothing to be held any more.
func (cs *consoleSetup) flowAgain(t *testing.T) {
	t.Helper()
	more := holdRows(8, 4, 40)
	cs.e.expect(more)
	insertHeldTest(t, cs.ob, cs.conn, more, nil)
	if !pgtest.WaitFor(60*time.Second, func() bool { return cs.e.delivered() == 48 }) {
		t.Fatalf("%d of 48 messages delivered after the release\n%s", cs.e.delivered(), cs.relay.Logs())
	}
	if held := statusHeld(t, cs.cfg); len(held) != 0 {
		t.Fatalf("cdc status held_keys after the release %+v, want none", held)
	}
}

// check stops the relay and checks that each key's messages arrived in
// order, the released row as fixed, and that the log records the release
// and its role, never a token.
func (cs *consoleSetup) check(t *testing.T) {
	t.Helper()
	cs.relay.Stop(t)
	cs.e.checkKeyOrder(t)
	cs.e.mu.Lock()
	defer cs.e.mu.Unlock()
	if got := cs.e.gotType[cs.bad.ID]; got != "fixed" {
		t.Errorf("the released row arrived with type %q, want the fixed one", got)
	}
	if len(cs.e.strangers) > 0 {
		t.Errorf("%d requests for messages never inserted, first %q", len(cs.e.strangers), cs.e.strangers[0])
	}
	logs := cs.relay.Stderr.String()
	if !strings.Contains(logs, `"role":"operate"`) || !strings.Contains(logs, "console: release") {
		t.Errorf("the log does not record the release with the operator's role:\n%s", grepLines(logs, "console"))
	}
	if strings.Contains(logs, consoleOperateToken) || strings.Contains(logs, consoleViewToken) {
		t.Errorf("the log shows a console token")
	}
}

// api calls the console's API as a script would.
func (cs *consoleSetup) api(t *testing.T, method, path, token, csrf, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+cs.addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if method == "POST" {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-CSRF-Token", csrf)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestIntegrationConsoleAPIReleasesAHeldKeyInOrder: through the console's
// JSON API, as a script would: no token is 401; the view token sees the
// held key k1 with its bad row but may not act (403); the operator's
// release of the unfixed row fails (422) and k1 stays held; once the row
// is fixed in the dead-letter table, the release delivers it and k1's
// held messages in order, and k1's next messages follow.
func TestIntegrationConsoleAPIReleasesAHeldKeyInOrder(t *testing.T) {
	t.Parallel()
	cs := newConsoleSetup(t)
	src := "/api/v1/sources/" + cs.source
	if code, _ := cs.api(t, "GET", src, "", "", ""); code != http.StatusUnauthorized {
		t.Errorf("GET %s without a token: %d, want 401", src, code)
	}
	code, body := cs.api(t, "GET", src, consoleViewToken, "", "")
	var d struct {
		HeldKeys []struct {
			Sink, Key string
			Messages  int
			Head      struct {
				ID      string          `json:"id"`
				RowData json.RawMessage `json:"row_data"`
			}
		} `json:"held_keys"`
		Groups []struct {
			ID    string `json:"id"`
			Count int    `json:"count"`
		} `json:"groups"`
	}
	if err := json.Unmarshal([]byte(body), &d); err != nil || code != 200 {
		t.Fatalf("GET %s: %d %v\n%s", src, code, err, body)
	}
	if len(d.HeldKeys) != 1 || d.HeldKeys[0].Key != "k1" || d.HeldKeys[0].Messages != 7 || d.HeldKeys[0].Head.ID != cs.bad.ID ||
		!strings.Contains(string(d.HeldKeys[0].Head.RowData), cs.bad.ID) {
		t.Fatalf("held keys %+v, want k1 with 7 parked behind %s, its row shown", d.HeldKeys, cs.bad.ID)
	}
	// The page shows the held row as JSON with how to fix it, its sink
	// as "all sinks".
	if code, page := cs.api(t, "GET", "/console/", consoleViewToken, "", ""); code != 200 || !strings.Contains(page, "Fix it before Release") ||
		!strings.Contains(page, "UPDATE "+cs.dlq) || !strings.Contains(page, "all sinks") || strings.Contains(page, "sink -") {
		t.Errorf("GET /console/: %d, want the held row with how to fix it, for all sinks\n%s", code, page)
	}
	_, sess := cs.api(t, "GET", "/api/v1/session", consoleViewToken, "", "")
	if strings.Contains(sess, "csrf_token") {
		t.Errorf("the view token's session holds the CSRF token: %s", sess)
	}
	release := `{"sink": "-", "key": "k1"}`
	_, sess = cs.api(t, "GET", "/api/v1/session", consoleOperateToken, "", "")
	csrf := csrfOf(t, sess)
	if code, body := cs.api(t, "POST", src+"/release", consoleViewToken, csrf, release); code != http.StatusForbidden {
		t.Errorf("release with the view token: %d %s, want 403", code, body)
	}
	if code, body := cs.api(t, "POST", src+"/release", consoleOperateToken, "", release); code != http.StatusForbidden {
		t.Errorf("release without the CSRF token: %d %s, want 403", code, body)
	}
	code, body = cs.api(t, "POST", src+"/release", consoleOperateToken, csrf, release)
	if code != http.StatusUnprocessableEntity || !strings.Contains(body, `"failed": 1`) || takenOf(cs.e, "k1") != 3 {
		t.Fatalf("release of the unfixed row: %d, k1 taken %d, want 422 and k1 still at 3\n%s", code, takenOf(cs.e, "k1"), body)
	}
	cs.fixBadRow(t)
	code, body = cs.api(t, "POST", src+"/release", consoleOperateToken, csrf, release)
	if code != http.StatusOK || strings.Count(body, `"result": "resent"`) != 7 || !strings.Contains(body, `"-|k1"`) {
		t.Fatalf("release of the fixed row: %d, want 200, 7 resent and k1 released\n%s", code, body)
	}
	cs.finish(t)
}

func csrfOf(t *testing.T, session string) string {
	t.Helper()
	var s struct {
		CSRF string `json:"csrf_token"`
	}
	if err := json.Unmarshal([]byte(session), &s); err != nil || s.CSRF == "" {
		t.Fatalf("session %q: %v", session, err)
	}
	return s.CSRF
}

// newBrowser starts a headless chromium (Debian's package; .ci/run
// installs it) with a 1200x800 window, or skips the test without one.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium is not installed (apt-get install chromium; .ci/run installs it): the console's browser test is skipped, its API test still runs")
	}
	// Without the background-networking flags chromium's own connections
	// are refused on a closed network, and it waits for them.
	opts := []chromedp.ExecAllocatorOption{chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1200, 800),
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true), chromedp.Flag("hide-scrollbars", true)}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return ctx
}

// as makes the browser send token as the password of basic
// authentication, as a browser does once its user typed it.
func as(token string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{
			Headers: network.Headers{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte("operator:"+token))}})
		return err
	})
}

// updateScreenshots: go test -run TestIntegrationConsoleInABrowser ./cmd/cdc -update
// rewrites the pictures in docs/console/; without it no test writes a
// tracked file.
var updateScreenshots = flag.Bool("update", false, "rewrite docs/console/*.png from the browser test")

// screenshot saves the window as docs/console/NAME.png with -update: the
// pictures of the docs are made here, so that they stay true. Without
// -update it captures nothing.
func screenshot(name string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		if !*updateScreenshots {
			return nil
		}
		png, err := chromedp.CaptureScreenshot()(ctx, t)
		if err != nil {
			return err
		}
		dir := filepath.Join("..", "..", "docs", "console")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644)
	})
}

// browse runs steps on the browser of ctx, within a minute.
func browse(t *testing.T, ctx context.Context, cs *consoleSetup, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(c, steps...); err != nil {
		t.Fatalf("%s: %v\n%s", what, err, cs.relay.Logs())
	}
}

// read runs a on the browser of ctx, within a minute, and returns its
// value.
func read[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	v, err := chromedp.Run(c, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// TestIntegrationConsoleInABrowserReleasesAHeldKeyInOrder: the console
// driven in a real headless browser, as an operator would: without a
// token the page is refused (401); a viewer sees the held key k1 and its
// bad row but no action; the operator sees the same with the actions,
// fixes the row (SQL on the dead-letter table), clicks Release, confirms,
// and reads that k1 was released; k1's messages arrive in order and its
// next ones follow. Screenshots of the views go to docs/console/.
func TestIntegrationConsoleInABrowserReleasesAHeldKeyInOrder(t *testing.T) {
	t.Parallel()
	ctx := newBrowser(t)
	cs := newConsoleSetup(t)
	page := "http://" + cs.addr + "/console/"

	// Headless, the browser cannot ask for the credentials a 401
	// challenges for: it answers the page load with
	// ERR_INVALID_AUTH_CREDENTIALS.
	c, cancel := context.WithTimeout(ctx, 60*time.Second)
	resp, err := chromedp.Run(c, chromedp.NavigateResponse(page))
	cancel()
	if (err == nil || !strings.Contains(err.Error(), "ERR_INVALID_AUTH_CREDENTIALS")) && (resp == nil || resp.Status != http.StatusUnauthorized) {
		t.Fatalf("the page without a token: %v %+v, want 401", err, resp)
	}

	// A few samples of the lag for the chart of the screenshots.
	if !pgtest.WaitFor(30*time.Second, func() bool {
		_, body := cs.api(t, "GET", "/api/v1/sources", consoleViewToken, "", "")
		return strings.Count(body, `"lag_bytes"`) >= 5 // the source's own, and 4 samples
	}) {
		t.Fatal("the console took no sample of the lag in 30 s")
	}

	held := `.held[data-key="k1"]`
	browse(t, ctx, cs, "the viewer's page", as(consoleViewToken), chromedp.Navigate(page), chromedp.WaitVisible(chromedp.CSS(held)), screenshot("viewer"))
	heldText := read(t, ctx, "the held key", chromedp.Text(chromedp.CSS(held)))
	buttons := read(t, ctx, "the buttons", chromedp.Evaluate[int](`document.querySelectorAll("button.act").length`))
	if !strings.Contains(heldText, cs.bad.ID) || buttons != 0 {
		t.Fatalf("the viewer's page: held key %q, %d action buttons; want the bad row %s and no action", heldText, buttons, cs.bad.ID)
	}

	browse(t, ctx, cs, "the operator's page", as(consoleOperateToken), chromedp.Navigate(page),
		chromedp.WaitVisible(chromedp.CSS(held+" button.release")), screenshot("held-key"))
	role := read(t, ctx, "the role", chromedp.Text(chromedp.CSS("#role")))
	heldText = read(t, ctx, "the held key", chromedp.Text(chromedp.CSS(held)))
	if !strings.HasPrefix(role, "operate") || !strings.Contains(heldText, cs.bad.ID) || !strings.Contains(heldText, `"type": ""`) {
		t.Fatalf("the operator's page: role %q, held key %q; want operate, and the bad row with its empty type", role, heldText)
	}

	browse(t, ctx, cs, "a failure group opened", chromedp.Click(chromedp.CSS("details.group summary")),
		chromedp.WaitVisible(chromedp.CSS("details.group[open] table.messages")), chromedp.ScrollIntoView(chromedp.CSS("details.group[open]")),
		screenshot("groups"), chromedp.Navigate(page), chromedp.WaitVisible(chromedp.CSS(held+" button.release")))

	cs.fixBadRow(t)
	browse(t, ctx, cs, "releasing k1", chromedp.Click(chromedp.CSS(held+" button.release")), chromedp.WaitVisible(chromedp.CSS("#confirm")),
		screenshot("confirm"), chromedp.Click(chromedp.CSS("#confirm-yes")),
		chromedp.WaitVisible(chromedp.CSS(`#result[data-state="done"], #result[data-state="failed"]`)))
	result := read(t, ctx, "the result", chromedp.Text(chromedp.CSS("#result")))
	if !strings.Contains(result, "key k1 released") || strings.Count(result, "resent ") != 7 {
		t.Fatalf("after the release the page says %q, want 7 resent and k1 released", result)
	}
	cs.flowAgain(t)
	browse(t, ctx, cs, "the page after the release", chromedp.Navigate(page), chromedp.WaitVisible(chromedp.CSS("section.source")),
		screenshot("released"))
	if left := read(t, ctx, "the held keys", chromedp.Evaluate[int](`document.querySelectorAll(".held").length`)); left != 0 {
		t.Errorf("the page after the release shows %d held keys, want none", left)
	}
	cs.check(t)
}

// TestIntegrationConsoleRefusesToResendAForgedEnvelope: a table-less
// outbox with postgres.message_keys; an unsigned envelope is parked
// unpublished. The console's resend of its group answers 422 with the
// signature named, as cdc dead-letter resend does; the row stays parked,
// not resent, and reaches no sink; the console's drop of it deletes it.
func TestIntegrationConsoleRefusesToResendAForgedEnvelope(t *testing.T) {
	t.Parallel()
	key := "0123456789abcdef0123456789abcdef"
	url := pgtest.URL(t)
	mo := relaytest.NewMessagesOutbox(t, url)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	port, err := pgtest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cfg := mo.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s}", out), "  message_keys: ["+key+"]",
		fmt.Sprintf("http: {listen: '%s', console: true, operate_token: %s}", addr, consoleOperateToken))
	relaytest.WithDeadLetterTable(t, url, cfg)
	cdcInit(t, cfg)
	mo.Key = []byte(key)
	conn := pgtest.Connect(t, url)
	ctx := context.Background()
	signed := relaytest.NewMsg("order.created", "k", 1)
	forgedID := relaytest.NewMsg("x", "k", 0).ID
	forged, err := outbox.Envelope(ctx, outbox.Message{ID: forgedID, Type: "order.refunded", Payload: []byte(`{"refund": 1000}`)}, outbox.Prefix(mo.Prefix))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_logical_emit_message(true, $1::text, $2::bytea)", mo.Prefix, forged); err != nil {
		t.Fatal(err)
	}
	mo.EmitTx(t, conn, signed)
	relay := startCDC(t, "run", "--config", cfg)
	relaytest.WaitAllDelivered(t, out, []relaytest.Msg{signed}, 60*time.Second, relay.Stderr.String)
	pgtest.Await(t, 30*time.Second, "the forged envelope parked", func() bool { return len(listParked(t, cfg)) == 1 })

	cs := &consoleSetup{addr: addr, relay: relay}
	src := "/api/v1/sources/" + mo.Slot
	_, body := cs.api(t, "GET", src, consoleOperateToken, "", "")
	var d struct {
		Groups []struct {
			ID       string `json:"id"`
			Messages []struct {
				Ref string `json:"ref"`
			} `json:"messages"`
		} `json:"groups"`
	}
	if err := json.Unmarshal([]byte(body), &d); err != nil || len(d.Groups) != 1 || len(d.Groups[0].Messages) != 1 {
		t.Fatalf("GET %s: %v, want one group of one message\n%s", src, err, body)
	}
	_, sess := cs.api(t, "GET", "/api/v1/session", consoleOperateToken, "", "")
	csrf := csrfOf(t, sess)
	code, body := cs.api(t, "POST", src+"/resend", consoleOperateToken, csrf, `{"group": "`+d.Groups[0].ID+`"}`)
	if code != http.StatusUnprocessableEntity || !strings.Contains(body, "postgres.message_keys") || !strings.Contains(body, `"result": "failed"`) {
		t.Fatalf("resend of the forged envelope: %d, want 422 naming postgres.message_keys\n%s", code, body)
	}
	if rows := listParked(t, cfg); len(rows) != 1 || rows[0].ResentAt != nil {
		t.Fatalf("after the refused resend: parked %+v, want the forged row, not resent", rows)
	}
	for _, l := range relaytest.ReadLines(t, out) {
		if l.ID == forgedID || l.Type == "order.refunded" {
			t.Fatalf("the forged message reached the sink: %+v", l)
		}
	}
	code, body = cs.api(t, "POST", src+"/drop", consoleOperateToken, csrf, `{"messages": ["`+d.Groups[0].Messages[0].Ref+`"]}`)
	if code != http.StatusOK || !strings.Contains(body, `"result": "dropped"`) || len(listParked(t, cfg)) != 0 {
		t.Fatalf("drop of the forged envelope: %d, parked %+v\n%s", code, listParked(t, cfg), body)
	}
	relay.Stop(t)
}

// TestIntegrationConsoleOfAFleetShowsEverySource: cdc run of a directory
// of two sources with http.console: the API shows both, each streaming in
// this instance with its own slot, and each source's sink counts only
// that source's messages.
func TestIntegrationConsoleOfAFleetShowsEverySource(t *testing.T) {
	serverURL := pgtest.URL(t)
	dir := t.TempDir()
	port, err := pgtest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	file := "  - {name: out, kind: file, path: {out}}"
	a := addFleetSource(t, dir, serverURL, "alpha", file, fmt.Sprintf("http: {listen: '%s', console: true, view_token: %s}", addr, consoleViewToken))
	b := addFleetSource(t, dir, serverURL, "beta", file, "")
	p := startCDC(t, "run", "--config", dir)
	cs := &consoleSetup{addr: addr, relay: p}
	msgs := []relaytest.Msg{relaytest.NewMsg("t", "k", 1), relaytest.NewMsg("t", "k", 2)}
	if !pgtest.WaitFor(60*time.Second, func() bool {
		_, body, err := fetch(addr, "/readyz")
		return err == nil && strings.HasPrefix(body, "ok")
	}) {
		t.Fatalf("the fleet is not ready\n%s", p.Logs())
	}
	conn := pgtest.Connect(t, b.url)
	for _, m := range msgs {
		b.ob.InsertTx(t, conn, m)
	}
	relaytest.WaitAllDelivered(t, b.out, msgs, 30*time.Second, p.Stderr.String)
	var got console.Sources
	if !pgtest.WaitFor(30*time.Second, func() bool {
		code, body := cs.api(t, "GET", "/api/v1/sources", consoleViewToken, "", "")
		got = console.Sources{}
		return code == 200 && json.Unmarshal([]byte(body), &got) == nil && len(got.Sources) == 2 &&
			got.Sources[0].Throughput[0].Published == 0 && got.Sources[1].Throughput[0].Published == 2 &&
			got.Sources[0].State == "streaming" && got.Sources[1].State == "streaming"
	}) {
		t.Fatalf("the console's sources %+v, want alpha (0 published) and beta (2)\n%s", got, p.Logs())
	}
	for i, s := range got.Sources {
		want := []fleetSource{a, b}[i]
		if s.Name != want.name || s.State != "streaming" || !s.Active || s.Slot != slotOf(t, want.cfg) {
			t.Errorf("source %d: %+v, want %s streaming here, its slot active", i, s, want.name)
		}
	}
	p.Stop(t)
}

// TestIntegrationConsoleReleasesThroughTheRelaysOwnFileSink: the README's
// setup, a file sink with relay.on_invalid: hold_key and the console on.
// A bad row holds its key; once the row is fixed, the release clicked on
// the console of that same cdc run goes through the relay's own file sink
// (its file is locked by the relay: a sink of the console's own could not
// write it) and delivers the key's messages in order, which the sink's
// published count includes; cdc dead-letter beside the running relay says
// at once what to do instead.
func TestIntegrationConsoleReleasesThroughTheRelaysOwnFileSink(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	port, err := pgtest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cfg := ob.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s}", out),
		fmt.Sprintf("relay: {on_invalid: hold_key}\nhttp: {listen: '%s', console: true, operate_token: %s}", addr, consoleOperateToken))
	dlq := relaytest.WithDeadLetterTable(t, url, cfg)
	cdcInit(t, cfg)
	conn := pgtest.Connect(t, url)
	msgs := []relaytest.Msg{relaytest.NewMsg("t", "k1", 1), relaytest.NewMsg("t", "k1", 2), relaytest.NewMsg("t", "k1", 3), relaytest.NewMsg("t", "k2", 4)}
	insertHeldTest(t, ob, conn, msgs, map[string]bool{msgs[1].ID: true})
	relay := startCDC(t, "run", "--config", cfg)
	cs := &consoleSetup{addr: addr, relay: relay}
	relaytest.WaitAllDelivered(t, out, []relaytest.Msg{msgs[0], msgs[3]}, 60*time.Second, relay.Stderr.String)
	pgtest.Await(t, 30*time.Second, "k1 held", func() bool { return len(statusHeld(t, cfg)) == 1 })
	// cdc status tells the held message from the bad row, and its exit
	// code tells a script that keys are held.
	if code, stdout, _ := cdc(t, nil, "status", "--config", cfg); code != heldExit ||
		!strings.Contains(stdout, "rows that could not be mapped: 1, held behind their key's first: 1") {
		t.Errorf("cdc status with k1 held: exit %d, want %d, one row that could not be mapped and one held\n%s", code, heldExit, stdout)
	}

	pgtest.Exec(t, url, fmt.Sprintf(`UPDATE %s SET row_data = jsonb_set(row_data, '{type}', '"t"') WHERE message_id = '%s'`, dlq, msgs[1].ID))
	if code, stdout, stderr := cdc(t, nil, "dead-letter", "--config", cfg, "resend", msgs[1].ID); code != 1 || !strings.Contains(stdout+stderr, "stop that cdc run") ||
		!strings.Contains(stdout+stderr, "console") {
		t.Errorf("cdc dead-letter resend beside the relay: exit %d, want 1 saying what to do\n%s%s", code, stdout, stderr)
	}
	_, sess := cs.api(t, "GET", "/api/v1/session", consoleOperateToken, "", "")
	src := "/api/v1/sources/" + ob.Slot
	code, body := cs.api(t, "POST", src+"/release", consoleOperateToken, csrfOf(t, sess), `{"sink": "-", "key": "k1"}`)
	if code != http.StatusOK || strings.Count(body, `"result": "resent"`) != 2 {
		t.Fatalf("release through the relay's file sink: %d, want 200 and 2 resent\n%s\n%s", code, body, relay.Logs())
	}
	lines := relaytest.ReadLines(t, out)
	if len(lines) != 4 || lines[2].ID != msgs[1].ID || lines[3].ID != msgs[2].ID {
		t.Fatalf("the file holds %+v, want k1's fixed row and the one held behind it after the others", lines)
	}
	var got console.Detail
	if code, body := cs.api(t, "GET", src, consoleOperateToken, "", ""); code != 200 || json.Unmarshal([]byte(body), &got) != nil ||
		len(got.Throughput) != 1 || got.Throughput[0].Published != 4 {
		t.Errorf("after the release: %d, throughput %+v, want 4 published (2 released)\n%s", code, got.Throughput, body)
	}
	if code, stdout, _ := cdc(t, nil, "status", "--config", cfg); code != 0 {
		t.Errorf("cdc status after the release: exit %d, want 0\n%s", code, stdout)
	}
	relay.Stop(t)
}
