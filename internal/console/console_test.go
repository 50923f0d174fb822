package console

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/fleet"
	// The stdout kind of the tests' sources: internal/ops links the kafka
	// kind in (its progress-topic check), and config then checks kinds.
	_ "github.com/walpost/walpost/internal/publish/file"
)

const viewToken, operateToken = "view-0123456789abcdef", "operate-0123456789abcdef"

// newTestConsole is a console of one source whose server cannot be
// reached (nothing listens on port 1): reads show the error, actions
// fail before anything is done.
func newTestConsole(t *testing.T, h config.HTTP) *httptest.Server {
	t.Helper()
	cfg, err := config.Parse([]byte("postgres: {url: 'postgres://walpost:secretpw@127.0.0.1:1/db?connect_timeout=2'}\nsinks:\n  - {name: out, kind: stdout}\n"), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Options{Sources: []Source{{Name: "orders", Config: cfg}}, HTTP: h, Log: zerolog.Nop(),
		Redact: func(s string) string { return strings.ReplaceAll(s, "secretpw", "[redacted]") }})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c.Handler())
	t.Cleanup(srv.Close)
	return srv
}

func do(t *testing.T, method, url, token string, hdr map[string]string, body string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// TestConsoleAnswersOnlyTokensAndViewersCannotAct: no token (or a wrong
// one) is 401 with a basic challenge; the view token reads the page, with
// no action on it and no CSRF token, and is refused every POST; the
// operate token's page carries the actions; the token is accepted as a
// basic password too.
func TestConsoleAnswersOnlyTokensAndViewersCannotAct(t *testing.T) {
	srv := newTestConsole(t, config.HTTP{Console: true, ViewToken: viewToken, OperateToken: operateToken})
	for _, tok := range []string{"", "wrong-0123456789abcdef"} {
		for _, p := range []string{"/console/", "/api/v1/sources", "/api/v1/session", "/console/assets/console.js"} {
			code, _, h := do(t, "GET", srv.URL+p, tok, nil, "")
			if code != http.StatusUnauthorized || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Basic") {
				t.Errorf("GET %s with token %q: %d (%q), want 401 with a basic challenge", p, tok, code, h.Get("WWW-Authenticate"))
			}
		}
	}
	code, page, h := do(t, "GET", srv.URL+"/console/", viewToken, nil, "")
	if code != 200 || !strings.Contains(page, "view (read only)") || strings.Contains(page, `data-action=`) || strings.Contains(page, "csrf-token") {
		t.Errorf("the viewer's page: %d, want 200, read only, with no action and no CSRF token\n%s", code, page)
	}
	if !strings.Contains(h.Get("Content-Security-Policy"), "frame-ancestors 'none'") || h.Get("Cache-Control") != "no-store" {
		t.Errorf("page headers %v, want a CSP without frames and no-store", h)
	}
	if strings.Contains(page, "secretpw") || strings.Contains(page, operateToken) || strings.Contains(page, viewToken) {
		t.Errorf("the page shows a secret:\n%s", page)
	}
	_, sess, _ := do(t, "GET", srv.URL+"/api/v1/session", viewToken, nil, "")
	csrf := between(sess, `"csrf_token": "`, `"`)
	code, body, _ := do(t, "POST", srv.URL+"/api/v1/sources/orders/resend", viewToken,
		map[string]string{"Content-Type": "application/json", "X-CSRF-Token": csrf}, `{"group": "x"}`)
	if code != http.StatusForbidden || !strings.Contains(body, "operate") {
		t.Errorf("POST with the view token: %d %s, want 403", code, body)
	}
	req, _ := http.NewRequest("GET", srv.URL+"/console/", nil)
	req.SetBasicAuth("anyone", operateToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `name="csrf-token"`) || !strings.Contains(string(b), "operate") {
		t.Errorf("the operator's page (basic password): %d, want 200 with the CSRF token\n%s", resp.StatusCode, b)
	}
}

// TestConsoleActionsNeedCSRFTokenJSONAndTheSameOrigin: an operator's POST
// without the process's CSRF token, with a stale one, from another
// origin or site, or as a form is refused before anything is read; a GET
// of an action path changes nothing (405).
func TestConsoleActionsNeedCSRFTokenJSONAndTheSameOrigin(t *testing.T) {
	srv := newTestConsole(t, config.HTTP{Console: true, OperateToken: operateToken})
	_, sess, _ := do(t, "GET", srv.URL+"/api/v1/session", operateToken, nil, "")
	csrf := between(sess, `"csrf_token": "`, `"`)
	if len(csrf) != 64 || !strings.Contains(sess, `"role": "operate"`) {
		t.Fatalf("session %s: want the operate role and a 64-hex CSRF token", sess)
	}
	jsonCT := "application/json"
	for _, tc := range []struct {
		name string
		hdr  map[string]string
		code int
	}{
		{"no token", map[string]string{"Content-Type": jsonCT}, 403},
		{"stale token", map[string]string{"Content-Type": jsonCT, "X-CSRF-Token": strings.Repeat("0", 64)}, 403},
		{"other origin", map[string]string{"Content-Type": jsonCT, "X-CSRF-Token": csrf, "Origin": "https://evil.example"}, 403},
		{"cross site", map[string]string{"Content-Type": jsonCT, "X-CSRF-Token": csrf, "Sec-Fetch-Site": "cross-site"}, 403},
		{"a form", map[string]string{"Content-Type": "application/x-www-form-urlencoded", "X-CSRF-Token": csrf}, 415},
	} {
		code, body, _ := do(t, "POST", srv.URL+"/api/v1/sources/orders/drop", operateToken, tc.hdr, `{"group": "x"}`)
		if code != tc.code {
			t.Errorf("%s: %d %s, want %d", tc.name, code, body, tc.code)
		}
	}
	if code, _, _ := do(t, "GET", srv.URL+"/api/v1/sources/orders/drop", operateToken, nil, ""); code != http.StatusMethodNotAllowed {
		t.Errorf("GET of an action: %d, want 405", code)
	}
	// Accepted checks, then the action fails at the server, and says so
	// without the password.
	code, body, _ := do(t, "POST", srv.URL+"/api/v1/sources/orders/drop", operateToken,
		map[string]string{"Content-Type": jsonCT, "X-CSRF-Token": csrf, "Origin": srv.URL, "Sec-Fetch-Site": "same-origin"}, `{"group": "x"}`)
	if code != http.StatusInternalServerError || strings.Contains(body, "secretpw") || !strings.Contains(body, "connecting to") {
		t.Errorf("an accepted POST with the server down: %d %s, want 500 naming the connection, no password", code, body)
	}
	code, body, _ = do(t, "POST", srv.URL+"/api/v1/sources/nope/drop", operateToken, map[string]string{"Content-Type": jsonCT, "X-CSRF-Token": csrf}, `{}`)
	if code != http.StatusNotFound {
		t.Errorf("an unknown source: %d %s, want 404", code, body)
	}
}

// TestConsoleWithoutTokensOnLoopbackLetsEveryRequestAct: with neither
// token nor http.auth (which config allows on a loopback listener only)
// every request is the operator.
func TestConsoleWithoutTokensOnLoopbackLetsEveryRequestAct(t *testing.T) {
	srv := newTestConsole(t, config.HTTP{Console: true})
	if _, sess, _ := do(t, "GET", srv.URL+"/api/v1/session", "", nil, ""); !strings.Contains(sess, `"role": "operate"`) {
		t.Errorf("session %s, want operate", sess)
	}
}

// TestConsoleWithoutTokensAnswersOnlyItsOwnHost: without credentials a
// request whose Host is not the listen address, localhost or a loopback
// address (a DNS-rebinding page's own name) is refused, GET and POST, and
// a POST's Origin must name one of them; with a token the Host does not
// matter, and the view role gets no CSRF token.
func TestConsoleWithoutTokensAnswersOnlyItsOwnHost(t *testing.T) {
	srv := newTestConsole(t, config.HTTP{Console: true, Listen: "127.0.0.2:9187"})
	req := func(method, path, host, origin string) int {
		t.Helper()
		r, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(`{}`))
		r.Host = host
		if origin != "" {
			r.Header.Set("Origin", origin)
		}
		r.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, host := range []string{"rebind.attacker.example:9187", "127.0.0.1.nip.io:9187", "localhost.attacker.example", "[::ffff:7f00:1]x"} {
		if code := req("GET", "/api/v1/session", host, ""); code != http.StatusForbidden {
			t.Errorf("GET with Host %q: %d, want 403", host, code)
		}
		if code := req("POST", "/api/v1/sources/orders/drop", host, "http://"+host); code != http.StatusForbidden {
			t.Errorf("POST with Host %q: %d, want 403", host, code)
		}
	}
	for _, host := range []string{"127.0.0.2:9187", "127.0.0.1:8080", "localhost:9187", "LOCALHOST", "[::1]:9187"} {
		if code := req("GET", "/api/v1/session", host, ""); code != http.StatusOK {
			t.Errorf("GET with Host %q: %d, want 200", host, code)
		}
	}
	if code := req("POST", "/api/v1/sources/orders/drop", "127.0.0.2:9187", "http://rebind.attacker.example:9187"); code != http.StatusForbidden {
		t.Errorf("POST with another Origin: %d, want 403", code)
	}
	tok := newTestConsole(t, config.HTTP{Console: true, ViewToken: viewToken, OperateToken: operateToken})
	if code, sess, _ := do(t, "GET", tok.URL+"/api/v1/session", viewToken, nil, ""); code != 200 || strings.Contains(sess, "csrf_token") {
		t.Errorf("the view token's session: %d %s, want 200 without csrf_token", code, sess)
	}
	if _, sess, _ := do(t, "GET", tok.URL+"/api/v1/session", operateToken, nil, ""); !strings.Contains(sess, "csrf_token") {
		t.Errorf("the operate token's session %s has no csrf_token", sess)
	}
}

// TestConsoleTakesHTTPAuthAsTheOperator: http.auth's credentials act.
func TestConsoleTakesHTTPAuthAsTheOperator(t *testing.T) {
	srv := newTestConsole(t, config.HTTP{Console: true, ViewToken: viewToken, Auth: &config.HTTPAuth{Username: "ops", Password: "pw-0123456789"}})
	req, _ := http.NewRequest("GET", srv.URL+"/api/v1/session", nil)
	req.SetBasicAuth("ops", "pw-0123456789")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"role": "operate"`) {
		t.Errorf("http.auth's session %d %s, want operate", resp.StatusCode, b)
	}
	req.SetBasicAuth("someone", "pw-0123456789")
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("http.auth's password with another user: %d, want 401", resp.StatusCode)
	}
}

func TestHistoryKeepsTheLastHourAndRates(t *testing.T) {
	h := &history{window: time.Hour}
	t0 := time.Now()
	for i := range 130 {
		h.add(Sample{At: t0.Add(time.Duration(i) * 30 * time.Second), LagBytes: int64(i), Published: map[string]float64{"out": float64(i * 60)}})
	}
	s := h.list()
	if len(s) != 121 || s[len(s)-1].At.Sub(s[0].At) != time.Hour {
		t.Errorf("%d samples over %v, want 121 over an hour", len(s), s[len(s)-1].At.Sub(s[0].At))
	}
	if r := rates(s)["out"]; r != 2 {
		t.Errorf("rate %v, want 2/s", r)
	}
	if ch := chartOf(s); ch.Empty || strings.Count(ch.Points, ",") != 121 || ch.Span != "1h0m0s" {
		t.Errorf("chart %+v", ch)
	}
}

func between(s, from, to string) string {
	_, s, _ = strings.Cut(s, from)
	s, _, _ = strings.Cut(s, to)
	return s
}

// TestConsoleOfAFleetShowsEachSourcesStateAndOwnMetrics: in a fleet each
// source shows its state in this instance and only the series with its
// source label; a source whose server cannot be reached shows why,
// without the password.
func TestConsoleOfAFleetShowsEachSourcesStateAndOwnMetrics(t *testing.T) {
	var sources []Source
	for _, name := range []string{"orders", "billing"} {
		cfg, err := config.Parse([]byte("postgres: {url: 'postgres://walpost:secretpw@127.0.0.1:1/db?connect_timeout=2', slot: "+name+"}\nsinks:\n  - {name: out, kind: stdout}\n"),
			func(string) (string, bool) { return "", false })
		if err != nil {
			t.Fatal(err)
		}
		sources = append(sources, Source{Name: name, Config: cfg})
	}
	reg := prometheus.NewRegistry()
	published := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "walpost_messages_published_total"}, []string{"source", "sink"})
	reg.MustRegister(published)
	published.WithLabelValues("orders", "out").Add(7)
	published.WithLabelValues("billing", "out").Add(3)
	report := func() fleet.Report {
		return fleet.Report{Sources: []fleet.Status{{Name: "orders", State: fleet.StateStreaming}, {Name: "billing", State: fleet.StateStandby}}}
	}
	c, err := New(Options{Sources: sources, Gatherer: reg, Fleet: report, Log: zerolog.Nop(),
		Redact: func(s string) string { return strings.ReplaceAll(s, "secretpw", "[redacted]") }})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c.Handler())
	defer srv.Close()
	_, body, _ := do(t, "GET", srv.URL+"/api/v1/sources", "", nil, "")
	var got Sources
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("%v\n%s", err, body)
	}
	want := map[string]struct {
		state     string
		published float64
	}{"orders": {"streaming", 7}, "billing": {"standby", 3}}
	if len(got.Sources) != 2 {
		t.Fatalf("%d sources, want 2\n%s", len(got.Sources), body)
	}
	for _, s := range got.Sources {
		w := want[s.Name]
		if s.State != w.state || len(s.Throughput) != 1 || s.Throughput[0].Published != w.published || s.Error == "" || strings.Contains(s.Error, "secretpw") {
			t.Errorf("source %s: %+v, want state %s, %v published, the error without the password", s.Name, s, w.state, w.published)
		}
	}
	_, page, _ := do(t, "GET", srv.URL+"/console/", "", nil, "")
	if !strings.Contains(page, "standby here") || !strings.Contains(page, "streaming here") || strings.Contains(page, "secretpw") {
		t.Errorf("the page does not show each source's state, or shows the password:\n%s", page)
	}
}
