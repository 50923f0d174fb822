package console

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"html/template"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/fleet"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/relay"
	"github.com/walpost/walpost/internal/tracing"
)

// Source is one source of the process: its name (the fleet's, or the
// slot's for cdc run of one file) and configuration.
type Source struct {
	Name   string
	Config *config.Config
	// Sinks returns the sinks of its relay in this process while it
	// streams (relay.Relay.Lent): the actions publish through them.
	Sinks func() []publish.Sink
	// Tracing, when set, records the resends' publish spans (tracing:;
	// internal/tracing; in a fleet, naming the source); nil: none.
	Tracing *tracing.Provider
}

// Options configure a Console.
type Options struct {
	// Sources are the process's sources, in the order shown.
	Sources []Source
	// HTTP is the process's http section: auth, view_token, operate_token.
	HTTP config.HTTP
	// Gatherer is the process's metrics registry (nil: no rates).
	Gatherer prometheus.Gatherer
	// Fleet, in a fleet, reports which sources this instance holds
	// (fleet.Fleet.Report); nil for cdc run of one file.
	Fleet func() fleet.Report
	// Log records every action.
	Log zerolog.Logger
	// Redact cuts secrets out of the errors shown (nil: none).
	Redact func(string) string
	// SampleEvery is how often Run samples the lag (default 30s); the
	// history keeps the last hour.
	SampleEvery time.Duration
}

// ErrNoSources is New's error without a source.
var ErrNoSources = errors.New("console: no source")

// Console serves the page and the API. Safe for concurrent use.
type Console struct {
	sources []*source
	http    config.HTTP
	gather  prometheus.Gatherer
	fleet   func() fleet.Report
	log     zerolog.Logger
	redact  func(string) string
	every   time.Duration
	csrf    string
	page    *template.Template
	// acting is held by the action running: one at a time.
	acting sync.Mutex
}

// source is a Source with its lag history.
type source struct {
	Source
	hist *history
}

// New returns a Console of o.Sources; call Run to sample their lag.
func New(o Options) (*Console, error) {
	if len(o.Sources) == 0 {
		return nil, ErrNoSources
	}
	if o.SampleEvery <= 0 {
		o.SampleEvery = 30 * time.Second
	}
	if o.Redact == nil {
		o.Redact = func(s string) string { return s }
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	page, err := parsePage()
	if err != nil {
		return nil, err
	}
	c := &Console{http: o.HTTP, gather: o.Gatherer, fleet: o.Fleet, log: o.Log, redact: o.Redact, every: o.SampleEvery,
		csrf: hex.EncodeToString(b), page: page}
	for _, s := range o.Sources {
		c.sources = append(c.sources, &source{Source: s, hist: &history{window: time.Hour}})
	}
	return c, nil
}

// Paths are the paths Handler serves, for the log.
const Paths = "/console/ /api/v1/"

// Handler serves /console/ and /api/v1/, each request authenticated
// (auth.go); mount it at both.
func (c *Console) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /console/{$}", c.servePage)
	mux.HandleFunc("GET /console/assets/{name}", serveAsset)
	mux.HandleFunc("GET /api/v1/session", c.serveSession)
	mux.HandleFunc("GET /api/v1/sources", c.serveSources)
	mux.HandleFunc("GET /api/v1/sources/{source}", c.serveSource)
	mux.HandleFunc("POST /api/v1/sources/{source}/{action}", c.serveAction)
	mux.HandleFunc("/console", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/console/", http.StatusFound) })
	return c.authenticate(secureHeaders(mux))
}

// secureHeaders keeps the page out of frames and caches and its scripts
// to its own.
func secureHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("Cache-Control", "no-store")
		h.ServeHTTP(w, r)
	})
}

// sourceNamed returns the source called name, or nil.
func (c *Console) sourceNamed(name string) *source {
	for _, s := range c.sources {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// metrics reads src's series from the Gatherer (relay.MetricsOf): those
// with its source label in a fleet, all of them otherwise.
func (c *Console) metrics(src *source) relay.SourceMetrics {
	if c.fleet == nil {
		return relay.MetricsOf(c.gather, "")
	}
	return relay.MetricsOf(c.gather, src.Name)
}
