package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/redact"
	"github.com/walpost/walpost/internal/relay"
)

// TestHTTPServesHealthReadinessMetricsAndPprofOnlyWhenAsked: /healthz is
// 200, /readyz 503 while the relay is not streaming, /metrics has the
// relay's metrics, and /debug/pprof/ exists only with http.pprof.
func TestHTTPServesHealthReadinessMetricsAndPprofOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse([]byte("postgres: {url: 'postgres://127.0.0.1:9/none'}\nsinks: [{name: out, kind: discard}]\n"), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	for _, withPprof := range []bool{false, true} {
		reg := prometheus.NewRegistry()
		r, err := relay.New(cfg, zerolog.Nop(), relay.NewMetrics(reg))
		if err != nil {
			t.Fatal(err)
		}
		srv, err := serveHTTP(config.HTTP{Listen: "127.0.0.1:0", Pprof: withPprof}, reg, r)
		if err != nil {
			t.Fatal(err)
		}
		get := func(path string) (int, string) {
			t.Helper()
			resp, err := http.Get("http://" + srv.Addr + path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		if code, _ := get("/healthz"); code != 200 {
			t.Errorf("/healthz: %d", code)
		}
		if code, _ := get("/readyz"); code != http.StatusServiceUnavailable {
			t.Errorf("/readyz before streaming: %d, want 503", code)
		}
		if code, body := get("/metrics"); code != 200 || !strings.Contains(body, "walpost_confirmed_lsn") {
			t.Errorf("/metrics: %d, walpost_confirmed_lsn missing:\n%.300s", code, body)
		}
		code, body := get("/debug/pprof/")
		if withPprof && (code != 200 || !strings.Contains(body, "goroutine")) {
			t.Errorf("pprof on: /debug/pprof/ %d", code)
		}
		if !withPprof && code != http.StatusNotFound {
			t.Errorf("pprof off: /debug/pprof/ %d, want 404", code)
		}
		srv.Close()
		r.Close()
	}
}

// TestHTTPBearerAuthGuardsMetricsAndPprofNotProbes: with http.auth
// bearer_token, /metrics and /debug/pprof/ answer 401 with a Bearer
// challenge unless the request carries the token (scheme in any case),
// and /healthz and /readyz answer as without authentication.
func TestHTTPBearerAuthGuardsMetricsAndPprofNotProbes(t *testing.T) {
	t.Parallel()
	const token = "tok-5f1d0a9c"
	cfg, err := config.Parse([]byte("postgres: {url: 'postgres://127.0.0.1:9/none'}\nsinks: [{name: out, kind: discard}]\n"), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	r, err := relay.New(cfg, zerolog.Nop(), relay.NewMetrics(reg))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := serveHTTP(config.HTTP{Listen: "127.0.0.1:0", Pprof: true, Auth: &config.HTTPAuth{BearerToken: token}}, reg, r)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	for _, path := range []string{"/metrics", "/debug/pprof/", "/debug/pprof/cmdline"} {
		for _, a := range []string{"", "Bearer wrong", "Bearer " + token + "x", "Basic " + token, token} {
			if code, challenge, _ := get(t, srv.Addr, path, a); code != http.StatusUnauthorized || challenge != `Bearer realm="walpost"` {
				t.Errorf("%s with %q: %d, WWW-Authenticate %q", path, a, code, challenge)
			}
		}
		for _, a := range []string{"Bearer " + token, "bearer " + token} {
			if code, _, _ := get(t, srv.Addr, path, a); code != http.StatusOK {
				t.Errorf("%s with %q: %d, want 200", path, a, code)
			}
		}
	}
	if code, _, _ := get(t, srv.Addr, "/healthz", ""); code != http.StatusOK {
		t.Errorf("/healthz without the token: %d", code)
	}
	if code, _, _ := get(t, srv.Addr, "/readyz", ""); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz without the token: %d, want 503 (not streaming), not 401", code)
	}
}

// TestHTTPAuthSecretsAreRedacted: http.auth's password and bearer token are
// among the config's secrets, so nothing the binary prints shows them.
func TestHTTPAuthSecretsAreRedacted(t *testing.T) {
	t.Parallel()
	for secret, auth := range map[string]string{"Pw-19a7c3": "{username: u, password: 'Pw-19a7c3'}", "Tok-19a7c3": "{bearer_token: 'Tok-19a7c3'}"} {
		cfg, err := config.Parse([]byte("postgres: {url: 'postgres://127.0.0.1:9/none'}\nsinks: [{name: out, kind: discard}]\nhttp: {listen: '127.0.0.1:0', auth: "+auth+"}\n"),
			func(string) (string, bool) { return "", false })
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		fmt.Fprintf(redact.NewSet(cfg.Secrets()...).Writer(&b), "user u, secret %s\n", secret)
		if strings.Contains(b.String(), secret) || !strings.Contains(b.String(), "user u") {
			t.Errorf("auth %s: printed %q", auth, b.String())
		}
	}
}
