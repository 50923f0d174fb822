package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/relaytest"
)

// get requests path from addr with the given Authorization header ("":
// none) and returns the status, the WWW-Authenticate header and the body.
func get(t *testing.T, addr, path, authorization string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest("GET", "http://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("WWW-Authenticate"), string(b)
}

// TestIntegrationMetricsBehindAuthShowEverySinkAtZero: with http.auth
// (basic), /metrics answers 401 with a challenge without credentials or
// with a wrong password, and with them shows, before any message, every
// per-sink series of every configured sink at 0 and walpost_build_info;
// /healthz and /readyz need no credentials; the password is never logged.
func TestIntegrationMetricsBehindAuthShowEverySinkAtZero(t *testing.T) {
	t.Parallel()
	const password = "scrape-Pw-7731"
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	port, err := pgtest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cfg := ob.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s}\n  - {name: audit, kind: discard}", filepath.Join(t.TempDir(), "out.jsonl")),
		fmt.Sprintf("http: {listen: '%s', auth: {username: scraper, password: '%s'}}", addr, password))
	cdcInit(t, cfg)
	p := startCDC(t, "run", cfg)
	if !pgtest.WaitFor(30*time.Second, func() bool { return readyz(addr) == http.StatusOK }) {
		t.Fatalf("/readyz did not become 200 without credentials:\n%s", p.Stderr.String())
	}
	if code, _, _ := get(t, addr, "/healthz", ""); code != http.StatusOK {
		t.Errorf("/healthz without credentials: %d", code)
	}
	basic := func(user, pass string) string {
		req, _ := http.NewRequest("GET", "/", nil)
		req.SetBasicAuth(user, pass)
		return req.Header.Get("Authorization")
	}
	for _, a := range []string{"", basic("scraper", "wrong"), basic("other", password), "Bearer " + password} {
		code, challenge, _ := get(t, addr, "/metrics", a)
		if code != http.StatusUnauthorized || !strings.HasPrefix(challenge, `Basic realm="walpost"`) {
			t.Errorf("/metrics with %q: %d, WWW-Authenticate %q; want 401 and a Basic challenge", a, code, challenge)
		}
	}
	code, _, body := get(t, addr, "/metrics", basic("scraper", password))
	if code != http.StatusOK {
		t.Fatalf("/metrics with the credentials: %d", code)
	}
	for _, sink := range []string{"out", "audit"} {
		for _, series := range []string{
			`walpost_messages_published_total{sink="%s"} 0`,
			`walpost_sink_failing{sink="%s"} 0`,
			`walpost_refused_total{sink="%s"} 0`,
			`walpost_end_to_end_latency_seconds_bucket{sink="%s",le="0.0005"} 0`,
			`walpost_end_to_end_latency_seconds_bucket{sink="%s",le="60"} 0`,
			`walpost_end_to_end_latency_seconds_count{sink="%s"} 0`,
		} {
			if s := fmt.Sprintf(series, sink); !strings.Contains(body, s+"\n") {
				t.Errorf("/metrics lacks %s", s)
			}
		}
		if n := strings.Count(body, fmt.Sprintf(`walpost_end_to_end_latency_seconds_bucket{sink="%s",`, sink)); n > 20 {
			t.Errorf("%d latency buckets for sink %s, want about 15", n, sink)
		}
	}
	if !regexp.MustCompile(`\nwalpost_build_info\{goversion="go[^"]+",revision="[^"]+",version="[^"]+"\} 1\n`).MatchString(body) {
		t.Errorf("/metrics lacks walpost_build_info:\n%s", grepLines(body, "build_info"))
	}
	if strings.Contains(p.Stderr.String(), password) {
		t.Errorf("the log shows the password:\n%s", p.Stderr.String())
	}
}

// TestHTTPAuthConfigErrors: http.auth with neither or both
// schemes, or half of basic, is a configuration error naming the field
// (exit 2), and the error never shows the secret.
func TestHTTPAuthConfigErrors(t *testing.T) {
	t.Parallel()
	const secret = "Tok-3141-secret"
	dir := t.TempDir()
	for i, c := range []struct{ auth, want string }{
		{"{}", "http.auth: empty"},
		{"{username: u, password: '" + secret + "', bearer_token: '" + secret + "'}", "http.auth: set username and password (basic authentication) or bearer_token, not both"},
		{"{password: '" + secret + "'}", "http.auth.username: empty"},
		{"{username: u}", "http.auth.password: empty"},
		{"{username: 'a:b', password: '" + secret + "'}", "http.auth.username: contains ':'"},
		{"{bearer_token: [" + secret + "]}", "http.auth.bearer_token"},
		{"{token: '" + secret + "'}", `unknown key "token"`},
	} {
		p := filepath.Join(dir, fmt.Sprintf("c%d.yaml", i))
		writeFile(t, p, "postgres: {url: 'postgres://u@127.0.0.1/app'}\nsinks: [{name: a, kind: discard}]\nhttp: {listen: '127.0.0.1:0', auth: "+c.auth+"}\n")
		code, stdout, stderr := cdc(t, nil, "run", p)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("auth %s: exit %d, want 2 with %q:\n%s", c.auth, code, c.want, stderr)
		}
		if strings.Contains(stdout+stderr, secret) {
			t.Errorf("auth %s: the secret was printed:\n%s", c.auth, stderr)
		}
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestIntegrationStallMetricsShowAStuckDeliveryByAge: while a webhook
// holds the one delivery in flight, walpost_oldest_inflight_seconds and
// walpost_slot_stalled_seconds (the slot does not move while the server's
// WAL is ahead) grow with time between scrapes; once the webhook answers,
// both are back at 0.
func TestIntegrationStallMetricsShowAStuckDeliveryByAge(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	release := make(chan struct{})
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	var once sync.Once
	answer := func() { once.Do(func() { close(release) }) }
	t.Cleanup(answer)
	port, err := pgtest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cfg := ob.Config(t, fmt.Sprintf("  - {name: hook, kind: webhook, url: %q, timeout: 120s}", srv.URL),
		fmt.Sprintf("http: {listen: '%s'}", addr))
	cdcInit(t, cfg)
	p := startCDC(t, "run", "--config", cfg)
	if !pgtest.WaitFor(30*time.Second, func() bool { return readyz(addr) == http.StatusOK }) {
		t.Fatalf("/readyz did not become 200:\n%s", p.Stderr.String())
	}
	gauge := func(name string) float64 {
		t.Helper()
		_, _, body := get(t, addr, "/metrics", "")
		m := regexp.MustCompile(`\n` + name + ` (\S+)\n`).FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("/metrics lacks %s:\n%s", name, grepLines(body, "walpost_"))
		}
		v, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	const oldest, stalled = "walpost_oldest_inflight_seconds", "walpost_slot_stalled_seconds"
	if o, s := gauge(oldest), gauge(stalled); o != 0 || s != 0 {
		t.Fatalf("idle relay: %s %v, %s %v; want 0 and 0", oldest, o, stalled, s)
	}
	conn := pgtest.Connect(t, url)
	ob.InsertTx(t, conn, relaytest.NewMsg("t", "k", 1))
	pgtest.Await(t, 60*time.Second, "the webhook holds the delivery", func() bool { return requests.Load() > 0 })
	pgtest.Await(t, 60*time.Second, "both ages reach 2 s", func() bool { return gauge(oldest) >= 2 && gauge(stalled) >= 2 })
	answer()
	pgtest.Await(t, 60*time.Second, "both ages back at 0 once the webhook answered", func() bool { return gauge(oldest) == 0 && gauge(stalled) == 0 })
}
