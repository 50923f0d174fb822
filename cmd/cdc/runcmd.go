package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/console"
	"github.com/walpost/walpost/internal/pgconnect"
	"github.com/walpost/walpost/internal/redact"
	"github.com/walpost/walpost/internal/relay"
	"github.com/walpost/walpost/internal/tracing"
)

// Durations in the log are whole milliseconds, in fields named with the
// unit (retry_in_ms, waited_ms: TestDurationFieldsCarryTheirUnit);
// zerolog's default is a float without a unit in sight (9220.41).
func init() { zerolog.DurationFieldInteger = true }

// newLogger returns the logger of c writing to w. The console format
// colours its lines only when color is true: stderr
// is a terminal and NO_COLOR is not set (colorful). A log written to a
// file or a pipe carries no ANSI escape sequences.
func newLogger(c config.Log, w io.Writer, color bool) zerolog.Logger {
	lvl, _ := zerolog.ParseLevel(c.Level)
	if c.Format == "console" {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly, NoColor: !color}
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger()
}

// colorful reports whether w is a terminal (a character device that is
// not /dev/null) and the environment does not ask for no colour
// (NO_COLOR set to anything, or TERM=dumb).
func colorful(w io.Writer) bool {
	if os.Getenv("NO_COLOR") != "" || os.Getenv("TERM") == "dumb" {
		return false
	}
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	if null, err := os.Stat(os.DevNull); err == nil && os.SameFile(fi, null) {
		return false
	}
	return true
}

// lineLogger is an io.Writer that logs every line written to it as one
// info record of log (a command's progress and reports, under log.format:
// json). Safe for concurrent use: cdc replay reports from its sinks'
// goroutines and its signal handler.
type lineLogger struct {
	log  zerolog.Logger
	mu   sync.Mutex
	part []byte // the start of a line not ended yet
}

func (l *lineLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			l.part = append(l.part, p...)
			break
		}
		line := string(append(l.part, p[:i]...))
		l.part = l.part[:0]
		p = p[i+1:]
		if line != "" {
			l.log.Info().Msg(line)
		}
	}
	return n, nil
}

// runCmd is cdc run: the relay, with its HTTP listener, until the context
// ends.
func runCmd(e *cmdEnv) error {
	cfg, log, reg := e.cfg, e.log, e.reg
	if os.Getenv("GOMAXPROCS") == "" && *cfg.Relay.Procs > 0 {
		runtime.GOMAXPROCS(*cfg.Relay.Procs)
	}
	b := readBuild()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	relay.RegisterBuildInfo(reg, b.version, b.revisionLabel())
	if cfg.HTTP.Listen != "" {
		ctx, stopConsole := context.WithCancel(e.ctx)
		defer stopConsole()
		routes, err := consoleRoutes(ctx, cfg.HTTP, console.Options{Sources: []console.Source{{Name: cfg.Postgres.Slot, Config: cfg, Sinks: e.relay.Lent, Tracing: tracing.FromContext(e.ctx)}},
			Gatherer: reg, Log: log, Redact: redact.NewSet(cfg.Secrets()...).Redact})
		if err != nil {
			return err
		}
		srv, err := serveHTTP(cfg.HTTP, reg, e.relay, routes...)
		if err != nil {
			return err
		}
		defer srv.Close()
		paths := "/metrics /healthz /readyz"
		if cfg.HTTP.Pprof {
			paths += " /debug/pprof/"
		}
		if cfg.HTTP.Console {
			paths += " " + console.Paths
		}
		log.Info().Str("listen", srv.Addr).Bool("auth", cfg.HTTP.Auth != nil).Msg("http: " + paths)
	}
	start := log.Info()
	if cfg.Postgres.TableLess() {
		start = start.Str("source", cfg.Postgres.Source).Str("prefix", cfg.Postgres.MessagePrefix)
	} else {
		start = start.Str("table", cfg.Postgres.Table)
	}
	start.Int("procs", runtime.GOMAXPROCS(0)).Str("version", b.version).Str("revision", b.revisionLabel()).
		Str("slot", cfg.Postgres.Slot).Int("sinks", len(cfg.Sinks)).Msg("starting")
	warnInsecure(cfg, log)
	warnDeprecated(cfg, log)
	e.relay.ConfigPath = e.opts.config
	err := e.relay.Run(e.ctx)
	if errors.Is(err, relay.ErrDrainCut) {
		return &exitCode{err, drainCutExit}
	}
	return err
}

// drainCutExit is cdc run's exit code when SIGINT/SIGTERM stopped it but
// relay.shutdown_timeout cut the drain short: nothing is lost, the
// deliveries in flight are sent again by the next run (docs/design.md,
// "Shutdown").
const drainCutExit = 3

// warnDeprecated logs, at start, each deprecated key the config sets,
// saying what to do instead (config.Config.Deprecations).
func warnDeprecated(cfg *config.Config, log zerolog.Logger) {
	for _, d := range cfg.Deprecations() {
		log.Warn().Msg(d)
	}
}

// warnInsecure logs, at start, settings that expose the relay's traffic or
// internals: Postgres TLS that does not verify the server to a remote
// host, and profiling endpoints without http.auth on a non-loopback
// address. (/metrics without http.auth draws no warning: it holds
// counters and sink names, no secret, and is usually scraped without
// credentials.)
func warnInsecure(cfg *config.Config, log zerolog.Logger) {
	if pc, err := pgconnect.ReplicationConfig(cfg.Postgres.URL); err == nil {
		if why := pgconnect.Unverified(pc); why != "" {
			log.Warn().Str("postgres", pgconnect.Describe(pc)).
				Msgf("postgres.url: %s: a machine between the relay and %s can read and alter the outbox stream; use sslmode=verify-full (with sslrootcert) for a remote server", why, pc.Host)
		}
	}
	if cfg.Postgres.PrimaryURL != "" {
		if pc, err := pgconnect.ReplicationConfig(cfg.Postgres.PrimaryURL); err == nil {
			if why := pgconnect.Unverified(pc); why != "" {
				log.Warn().Str("postgres", pgconnect.Describe(pc)).
					Msgf("postgres.primary_url: %s: a machine between the relay and %s can read and alter the relay's state (progress, dead letters); use sslmode=verify-full (with sslrootcert) for a remote server", why, pc.Host)
			}
		}
	}
	if cfg.HTTP.Pprof && cfg.HTTP.Listen != "" && cfg.HTTP.Auth == nil {
		host, _, err := net.SplitHostPort(cfg.HTTP.Listen)
		if err != nil || !pgconnect.IsLocal(host) {
			log.Warn().Str("listen", cfg.HTTP.Listen).
				Msg("http.pprof is on and http.listen is not a loopback address: anyone who reaches the port can profile the process and read its memory; listen on 127.0.0.1, set http.auth or turn pprof off")
		}
	}
}
