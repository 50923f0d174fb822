package main

import (
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/pgconnect"
	"github.com/walpost/walpost/internal/relay"
)

func newLogger(c config.Log, w io.Writer) zerolog.Logger {
	lvl, _ := zerolog.ParseLevel(c.Level)
	if c.Format == "console" {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger()
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
		srv, err := serveHTTP(cfg.HTTP, reg, e.relay)
		if err != nil {
			return err
		}
		defer srv.Close()
		paths := "/metrics /healthz /readyz"
		if cfg.HTTP.Pprof {
			paths += " /debug/pprof/"
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
	if cfg.HTTP.Pprof && cfg.HTTP.Listen != "" && cfg.HTTP.Auth == nil {
		host, _, err := net.SplitHostPort(cfg.HTTP.Listen)
		if err != nil || !pgconnect.IsLocal(host) {
			log.Warn().Str("listen", cfg.HTTP.Listen).
				Msg("http.pprof is on and http.listen is not a loopback address: anyone who reaches the port can profile the process and read its memory; listen on 127.0.0.1, set http.auth or turn pprof off")
		}
	}
}
