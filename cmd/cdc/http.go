package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/console"
	"github.com/walpost/walpost/internal/httpauth"
)

// readier answers /readyz: a *relay.Relay (streaming), or several
// sources (internal/fleet), which also serve it themselves (ServeReadyz).
type readier interface{ Ready() bool }

// route is a path served behind http.auth, as /metrics is; or, with
// ownAuth, one that authenticates itself (the console: its tokens, and
// http.auth's credentials, internal/console).
type route struct {
	path    string
	h       http.Handler
	ownAuth bool
}

// serveHTTP serves /metrics (and /debug/pprof/ with http.pprof, and the
// guarded routes), behind http.auth when set, and /healthz and /readyz,
// never behind it: probes carry no credentials. A route with ownAuth
// authenticates itself.
func serveHTTP(c config.HTTP, reg *prometheus.Registry, r readier, guarded ...route) (*http.Server, error) {
	mux := http.NewServeMux()
	guard := func(h http.Handler) http.Handler { return requireAuth(c.Auth, h) }
	if c.Pprof {
		mux.Handle("/debug/pprof/", guard(http.HandlerFunc(pprof.Index)))
		mux.Handle("/debug/pprof/cmdline", guard(http.HandlerFunc(pprof.Cmdline)))
		mux.Handle("/debug/pprof/profile", guard(http.HandlerFunc(pprof.Profile)))
		mux.Handle("/debug/pprof/symbol", guard(http.HandlerFunc(pprof.Symbol)))
		mux.Handle("/debug/pprof/trace", guard(http.HandlerFunc(pprof.Trace)))
	}
	mux.Handle("/metrics", guard(promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	for _, g := range guarded {
		if g.ownAuth {
			mux.Handle(g.path, g.h)
			continue
		}
		mux.Handle(g.path, guard(g.h))
	}
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, req *http.Request) {
		if s, ok := r.(interface {
			ServeReadyz(http.ResponseWriter, *http.Request)
		}); ok {
			s.ServeReadyz(w, req)
			return
		}
		if !r.Ready() {
			http.Error(w, "not streaming", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	l, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return nil, fmt.Errorf("http.listen: %w", err)
	}
	srv := &http.Server{Addr: l.Addr().String(), Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(l)
	return srv, nil
}

// requireAuth answers 401, with the WWW-Authenticate challenge of the
// configured scheme, to a request without the credentials of a (nil: no
// authentication).
func requireAuth(a *config.HTTPAuth, h http.Handler) http.Handler {
	if a == nil {
		return h
	}
	challenge := `Basic realm="walpost", charset="UTF-8"`
	if a.BearerToken != "" {
		challenge = `Bearer realm="walpost"`
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if !httpauth.Authorized(a, req) {
			w.Header().Set("WWW-Authenticate", challenge)
			http.Error(w, "unauthorized: see http.auth", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, req)
	})
}

// consoleRoutes returns the routes of the operator's console
// (http.console; internal/console) of sources, and starts its lag
// sampler until ctx ends; none when the console is off.
func consoleRoutes(ctx context.Context, c config.HTTP, o console.Options) ([]route, error) {
	if !c.Console {
		return nil, nil
	}
	o.HTTP = c
	if v := os.Getenv("CDC_CONSOLE_SAMPLE_EVERY"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("CDC_CONSOLE_SAMPLE_EVERY=%q: give a positive duration (30s)", v)
		}
		o.SampleEvery = d
	}
	con, err := console.New(o)
	if err != nil {
		return nil, err
	}
	go con.Run(ctx)
	h := con.Handler()
	return []route{{"/console", h, true}, {"/console/", h, true}, {"/api/v1/", h, true}}, nil
}
