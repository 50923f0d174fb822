package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/relaytest"
)

// fleetSource is one source of a test of several sources: a database of
// its own, an outbox in it, a file sink's file, and its config file in
// the test's config directory (named after the source).
type fleetSource struct {
	name string
	url  string // its database
	db   string // the database's name
	ob   relaytest.Outbox
	out  string // its file sink's file
	cfg  string // its config file
}

// sourceDB creates a database of the test's own on the server of
// serverURL (a URL of its postgres database) and returns its name and
// URL. It is dropped when the test ends.
func sourceDB(t *testing.T, serverURL string) (name, url string) {
	t.Helper()
	name = pgtest.Name(t, "db")
	if len(name) > 63 {
		name = name[len(name)-63:]
	}
	pgtest.Exec(t, serverURL, "CREATE DATABASE "+name)
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), serverURL)
		if err != nil {
			return
		}
		defer c.Close(context.Background())
		c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	if !strings.Contains(serverURL, "/postgres?") {
		t.Fatalf("%s: not a URL of the postgres database", serverURL)
	}
	return name, strings.Replace(serverURL, "/postgres?", "/"+name+"?", 1)
}

// addFleetSource makes a source called name in the config directory dir:
// its database, outbox and config file, with the sinks YAML (where
// {out} stands for its file sink's path) and extra top-level YAML; then
// runs cdc init on it.
func addFleetSource(t *testing.T, dir, serverURL, name, sinks, extra string) fleetSource {
	t.Helper()
	s := fleetSource{name: name}
	s.db, s.url = sourceDB(t, serverURL)
	s.ob = relaytest.NewOutbox(t, s.url)
	s.out = filepath.Join(t.TempDir(), name+".jsonl")
	tmp := s.ob.Config(t, strings.ReplaceAll(sinks, "{out}", s.out), extra)
	b, err := os.ReadFile(tmp)
	if err != nil {
		t.Fatal(err)
	}
	s.cfg = filepath.Join(dir, name+".yaml")
	writeFile(t, s.cfg, string(b))
	cdcInit(t, s.cfg)
	return s
}

// fetch requests http://addr+path; err when it could not.
func fetch(addr, path string) (int, string, error) {
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// sourcesReport is /sources as the tests read it.
type sourcesReport struct {
	Ready        bool   `json:"ready"`
	MaxActive    int    `json:"max_active"`
	CapacityUsed int    `json:"capacity_used"`
	Why          string `json:"why"`
	Sources      []struct {
		Name         string   `json:"name"`
		State        string   `json:"state"`
		Unowned      bool     `json:"unowned"`
		Failures     int      `json:"failures"`
		Error        *string  `json:"error"`
		FailingSinks []string `json:"failing_sinks"`
	} `json:"sources"`
}

// readSources reads /sources of the instance at addr (false when it does
// not answer).
func readSources(addr string) (sourcesReport, bool) {
	var r sourcesReport
	code, body, err := fetch(addr, "/sources")
	if err != nil || code != http.StatusOK {
		return r, false
	}
	return r, json.Unmarshal([]byte(body), &r) == nil
}

// states returns each source's state in r.
func (r sourcesReport) states() map[string]string {
	m := map[string]string{}
	for _, s := range r.Sources {
		m[s.Name] = s.State
	}
	return m
}

// metricValue reads one series of /metrics text: the value of the line
// that starts with series (name and labels as exposed), -1 when absent.
func metricValue(metrics, series string) float64 {
	for _, l := range strings.Split(metrics, "\n") {
		if rest, ok := strings.CutPrefix(l, series+" "); ok {
			var v float64
			fmt.Sscan(rest, &v)
			return v
		}
	}
	return -1
}

// dropDatabase drops a database a relay streams from: its WAL sender is
// ended and its slot dropped before the relay reconnects, then the
// database (with its other connections) is dropped.
func dropDatabase(t *testing.T, serverURL string, s fleetSource) {
	t.Helper()
	ctx := context.Background()
	conn := pgtest.Connect(t, serverURL)
	if !pgtest.WaitFor(30*time.Second, func() bool {
		conn.Exec(ctx, "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL", s.ob.Slot)
		_, err := conn.Exec(ctx, "DROP DATABASE "+s.db+" WITH (FORCE)")
		return err == nil
	}) {
		t.Fatalf("could not drop database %s", s.db)
	}
}

// TestIntegrationSourcesInOneProcessAreIsolated: four sources in one
// `cdc run --config DIR`, each its own database: one healthy; one whose
// webhook answers 500 (its sink retries for ever); one that meets a bad
// row under relay.on_invalid: stop (its relay stops); one whose database
// is dropped while it streams (its relay stops). The healthy source
// delivers every row at once, before and after the others fail; the
// process goes on; /readyz stays 200 and ?verbose, /sources, /metrics and
// cdc status on the directory show which failed and how. SIGTERM then
// stops it: exit 3, as the failing webhook's drain is cut.
func TestIntegrationSourcesInOneProcessAreIsolated(t *testing.T) {
	serverURL := pgtest.URL(t)
	dir := t.TempDir()
	port, err := pgtest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "down", http.StatusInternalServerError)
	}))
	defer hook.Close()
	file := "  - {name: out, kind: file, path: {out}}"
	// http: in one file only: the others take it.
	healthy := addFleetSource(t, dir, serverURL, "healthy", file, fmt.Sprintf("http: {listen: '%s'}", addr))
	sinkDown := addFleetSource(t, dir, serverURL, "sinkdown", fmt.Sprintf("  - {name: hook, kind: webhook, url: %q, timeout: 2s}", hook.URL),
		"relay: {retry_backoff: 1s, shutdown_timeout: 2s}")
	badRow := addFleetSource(t, dir, serverURL, "badrow", file, "")
	dropped := addFleetSource(t, dir, serverURL, "dropped", file, "")

	p := startCDC(t, "run", "--config", dir)
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format+"\nlog:\n%s", append(args, p.Stderr.String())...)
	}
	if !pgtest.WaitFor(60*time.Second, func() bool {
		r, ok := readSources(addr)
		st := r.states()
		return ok && st["healthy"] == "streaming" && st["sinkdown"] == "streaming" && st["badrow"] == "streaming" && st["dropped"] == "streaming"
	}) {
		r, _ := readSources(addr)
		fail("the four sources did not all stream: %+v", r)
	}
	conns := map[string]*pgx.Conn{}
	for _, s := range []fleetSource{healthy, sinkDown, badRow, dropped} {
		conns[s.name] = pgtest.Connect(t, s.url)
	}
	var want []relaytest.Msg
	send := func(n int) {
		for i := range n {
			m := relaytest.NewMsg("t", "k", len(want)+i)
			healthy.ob.InsertTx(t, conns["healthy"], m)
			want = append(want, m)
		}
	}
	send(10)
	relaytest.WaitAllDelivered(t, healthy.out, want, 30*time.Second, p.Stderr.String)

	// The three failures.
	for i := range 5 {
		sinkDown.ob.InsertTx(t, conns["sinkdown"], relaytest.NewMsg("t", "k", i))
	}
	good := relaytest.NewMsg("t", "k", 0)
	badRow.ob.InsertTx(t, conns["badrow"], good)
	pgtest.Exec(t, badRow.url, "INSERT INTO "+badRow.ob.Table+" (id, type, payload) VALUES (gen_random_uuid(), '', '{}')")
	dropped.ob.InsertTx(t, conns["dropped"], relaytest.NewMsg("t", "k", 0))
	conns["dropped"].Close(context.Background())
	dropDatabase(t, serverURL, dropped)

	// Whatever the others do, the healthy source delivers at once.
	start := time.Now()
	send(200)
	relaytest.WaitAllDelivered(t, healthy.out, want, 30*time.Second, p.Stderr.String)
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the healthy source took %v to deliver 200 rows while the others failed", d)
	}
	relaytest.WaitAllDelivered(t, badRow.out, []relaytest.Msg{good}, 30*time.Second, p.Stderr.String)

	var rep sourcesReport
	if !pgtest.WaitFor(60*time.Second, func() bool {
		r, ok := readSources(addr)
		rep = r
		st := r.states()
		return ok && st["badrow"] == "failed" && st["dropped"] == "failed" && st["healthy"] == "streaming" && st["sinkdown"] == "streaming" &&
			len(r.Sources) == 4 && len(r.Sources[3].FailingSinks) == 1 // sorted by file: badrow, dropped, healthy, sinkdown
	}) {
		fail("/sources did not show badrow and dropped failed, sinkdown's sink failing: %+v", rep)
	}
	errs := map[string]string{}
	for _, s := range rep.Sources {
		if s.Error != nil {
			errs[s.Name] = *s.Error
		}
	}
	if !strings.Contains(errs["badrow"], "on_invalid") || !strings.Contains(errs["dropped"], "does not exist") || rep.Sources[3].FailingSinks[0] != "hook" {
		t.Errorf("/sources errors %q, sinkdown's failing sinks %v", errs, rep.Sources[3].FailingSinks)
	}
	send(50) // still at once, the failures standing
	relaytest.WaitAllDelivered(t, healthy.out, want, 30*time.Second, p.Stderr.String)

	code, body, err := fetch(addr, "/readyz?verbose")
	if err != nil || code != http.StatusOK {
		fail("/readyz?verbose: %d %v %s", code, err, body)
	}
	for _, line := range []string{"badrow failed", "dropped failed", "healthy streaming", "sinkdown streaming failing_sinks=hook"} {
		if !strings.Contains(body, "\n"+line+"\n") {
			t.Errorf("/readyz?verbose lacks %q:\n%s", line, body)
		}
	}
	if !strings.HasPrefix(body, "ok: 2 streaming, 2 failed\n") {
		t.Errorf("/readyz?verbose: %q", body)
	}
	// The file holds a line once written; the relay counts it published
	// once the sink returned (after its fsync): wait for the count.
	var metrics string
	pgtest.WaitFor(10*time.Second, func() bool {
		_, metrics, err = fetch(addr, "/metrics")
		return err == nil && metricValue(metrics, `walpost_messages_published_total{sink="out",source="healthy"}`) == float64(len(want))
	})
	if err != nil {
		t.Fatal(err)
	}
	for series, want := range map[string]float64{
		`walpost_source_failed{source="badrow"}`:                        1,
		`walpost_source_failed{source="dropped"}`:                       1,
		`walpost_source_failed{source="healthy"}`:                       0,
		`walpost_source_failures_total{source="badrow"}`:                1,
		`walpost_sink_failing{sink="hook",source="sinkdown"}`:           1,
		`walpost_sink_failing{sink="out",source="healthy"}`:             0,
		`walpost_messages_published_total{sink="out",source="healthy"}`: float64(len(want)),
		`walpost_fleet_sources`:                                         4,
		`walpost_fleet_max_active`:                                      0,
	} {
		if got := metricValue(metrics, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	if metricValue(metrics, "walpost_messages_published_total") != -1 {
		t.Error("a series without the source label: every source's metrics carry source=<name>")
	}

	// cdc status on the directory: every source, exit 1 for the dropped one.
	code, stdout, stderr := cdc(t, nil, "status", "--config", dir)
	if code != 1 || !strings.Contains(stderr, "cdc status: source dropped: ") || strings.Contains(stderr, "source healthy") {
		t.Errorf("cdc status --config DIR: exit %d, want 1 and the dropped source's error only:\n%s", code, stderr)
	}
	for _, s := range []string{"badrow", "dropped", "healthy", "sinkdown"} {
		if !strings.Contains(stdout, "== source "+s+" (") {
			t.Errorf("cdc status does not show source %s:\n%s", s, stdout)
		}
	}
	if n := strings.Count(stdout, "slot:          "); n != 3 {
		t.Errorf("cdc status showed %d slots, want 3 (the dropped database's cannot be read):\n%s", n, stdout)
	}
	type sourceJSON struct {
		Source string          `json:"source"`
		Status json.RawMessage `json:"status"`
		Error  *string         `json:"error"`
	}
	var js struct {
		Sources []sourceJSON `json:"sources"`
	}
	// The failing webhook is in the progress table once the relay's
	// progress writer has run after the failure (at most an interval).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		code, stdout, _ = cdc(t, nil, "status", "--json", "--config", dir)
		js.Sources = nil
		if err := json.Unmarshal([]byte(stdout), &js); err != nil || code != 1 || len(js.Sources) != 4 {
			t.Fatalf("cdc status --json --config DIR: exit %d, %v:\n%s", code, err, stdout)
		}
		if i := slices.IndexFunc(js.Sources, func(s sourceJSON) bool { return s.Source == "sinkdown" }); i < 0 || js.Sources[i].Error != nil || time.Now().After(deadline) {
			break
		}
	}
	for _, s := range js.Sources {
		var st struct {
			Slot string `json:"slot"`
		}
		json.Unmarshal(s.Status, &st)
		switch {
		case s.Source == "dropped" && (s.Error == nil || string(s.Status) != "null"):
			t.Errorf("cdc status --json: the dropped source: %s, error %v", s.Status, s.Error)
		case s.Source == "sinkdown": // its status, and its failing sink as its error
			if s.Error == nil || !strings.Contains(*s.Error, "sink hook is failing") || st.Slot == "" {
				t.Errorf("cdc status --json: source sinkdown: %s, error %v", s.Status, s.Error)
			}
		case s.Source != "dropped" && (s.Error != nil || st.Slot == ""):
			t.Errorf("cdc status --json: source %s: %s, error %v", s.Source, s.Status, *s.Error)
		}
	}

	if p.Exited() {
		fail("cdc run exited")
	}
	p.Cmd.Process.Signal(syscall.SIGTERM)
	if code := p.Wait(30 * time.Second); code != drainCutExit {
		fail("cdc run exited %d after SIGTERM, want %d (the failing webhook's drain cut)", code, drainCutExit)
	}
	if !regexp.MustCompile(`"error":"source sinkdown: relay: relay.shutdown_timeout cut the drain`).MatchString(p.Stderr.String()) {
		t.Errorf("no log of the sinkdown source's cut drain:\n%s", p.Stderr.String())
	}
}

// TestIntegrationShortCapacityLeavesASourceUnownedAndShowsIt: two sources,
// one instance with --max-active 1: one streams, the other waits for
// capacity without trying its slot, and as no process holds that slot it
// is shown unowned (/sources, walpost_source_unowned, a warning) while the
// instance stays ready. A second instance takes the waiting source: it
// streams there, and the first no longer counts it unowned.
func TestIntegrationShortCapacityLeavesASourceUnownedAndShowsIt(t *testing.T) {
	serverURL := pgtest.URL(t)
	dir := t.TempDir()
	file := "  - {name: out, kind: file, path: {out}}"
	a := addFleetSource(t, dir, serverURL, "a", file, "")
	b := addFleetSource(t, dir, serverURL, "b", file, "")
	var addrs []string
	for range 2 {
		port, err := pgtest.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, fmt.Sprintf("127.0.0.1:%d", port))
	}
	first := startCDCEnv(t, []string{"CDC_HTTP_LISTEN=" + addrs[0]}, "run", "--config", dir, "--max-active", "1")
	var rep sourcesReport
	if !pgtest.WaitFor(60*time.Second, func() bool {
		var ok bool
		rep, ok = readSources(addrs[0])
		st := rep.states()
		waiting := st["a"] == "waiting_for_capacity" || st["b"] == "waiting_for_capacity"
		return ok && waiting && (st["a"] == "streaming" || st["b"] == "streaming") && rep.Sources[0].Unowned != rep.Sources[1].Unowned
	}) {
		t.Fatalf("one source did not stream and the other wait unowned: %+v\n%s", rep, first.Stderr.String())
	}
	waiting := a
	if rep.states()["b"] == "waiting_for_capacity" {
		waiting = b
	}
	_, metrics, _ := fetch(addrs[0], "/metrics")
	if v := metricValue(metrics, `walpost_source_unowned{source="`+waiting.name+`"}`); v != 1 {
		t.Errorf("walpost_source_unowned of %s = %v, want 1", waiting.name, v)
	}
	if v := metricValue(metrics, `walpost_source_waiting_for_capacity{source="`+waiting.name+`"}`); v != 1 {
		t.Errorf("walpost_source_waiting_for_capacity of %s = %v, want 1", waiting.name, v)
	}
	if v := metricValue(metrics, "walpost_fleet_capacity_used"); v != 1 {
		t.Errorf("walpost_fleet_capacity_used = %v, want 1", v)
	}
	if !strings.Contains(first.Stderr.String(), `"source":"`+waiting.name+`"`) || !strings.Contains(first.Stderr.String(), "the fleet lacks capacity") {
		t.Errorf("no warning of the unowned source:\n%s", first.Stderr.String())
	}
	if code, body, _ := fetch(addrs[0], "/readyz?verbose"); code != http.StatusOK || !strings.Contains(body, waiting.name+" waiting_for_capacity unowned\n") {
		t.Errorf("/readyz?verbose: %d\n%s", code, body)
	}

	second := startCDCEnv(t, []string{"CDC_HTTP_LISTEN=" + addrs[1]}, "run", "--config", dir, "--max-active", "1")
	conn := pgtest.Connect(t, waiting.url)
	m := relaytest.NewMsg("t", "k", 1)
	waiting.ob.InsertTx(t, conn, m)
	relaytest.WaitAllDelivered(t, waiting.out, []relaytest.Msg{m}, 60*time.Second, second.Stderr.String)
	if !pgtest.WaitFor(30*time.Second, func() bool {
		r, ok := readSources(addrs[0])
		for _, s := range r.Sources {
			if s.Name == waiting.name {
				return ok && s.State == "waiting_for_capacity" && !s.Unowned
			}
		}
		return false
	}) {
		r, _ := readSources(addrs[0])
		t.Fatalf("the first instance still counts %s unowned once the second holds it: %+v", waiting.name, r)
	}
	if r, _ := readSources(addrs[1]); r.states()[waiting.name] != "streaming" {
		t.Errorf("second instance: %+v", r)
	}
}
