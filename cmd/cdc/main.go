// Command cdc is the walpost relay: it streams outbox INSERTs out of
// PostgreSQL logical replication to brokers, confirming the slot only after
// every sink acknowledged.
//
//	cdc run    --config cdc.yaml   relay until SIGINT/SIGTERM (graceful drain)
//	cdc init   --config cdc.yaml   create the outbox table (if missing), publication, slot and state tables
//	cdc status --config cdc.yaml   slot, confirmed LSN, lag, active or not
//	cdc skip   --config cdc.yaml --lsn X   park the one bad row a relay stops at
//	cdc version
//
// Exit codes: 0 after a clean stop, 1 on a runtime error, 2 on a usage or
// configuration error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/pgconnect"
	_ "github.com/walpost/walpost/internal/publish/kafka"      // registers kind: kafka
	_ "github.com/walpost/walpost/internal/publish/natsjs"     // registers kind: nats
	_ "github.com/walpost/walpost/internal/publish/servicebus" // registers kind: servicebus
	"github.com/walpost/walpost/internal/redact"
	"github.com/walpost/walpost/internal/relay"
	"github.com/walpost/walpost/internal/replication"
	"github.com/walpost/walpost/internal/store"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3".
var version = ""

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: cdc <command> [--config cdc.yaml]

commands:
  run      relay outbox messages until SIGINT/SIGTERM (creates nothing: run init first)
  init     create the outbox table (if missing), the publication, the slot,
           and the progress and dead-letter tables
  status   show the slot: confirmed LSN, lag in bytes, active or not
  skip     --lsn X: park in the dead-letter table the one row that a relay
           with on_invalid: stop stops at, so that the next run goes past it
  version  print the version

The config file defaults to $CDC_CONFIG, then ./cdc.yaml. ${VAR} in the file
is replaced from the environment; CDC_POSTGRES_URL and the other CDC_* variables
override settings (see README).
`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmd := args[0]
	fs := flag.NewFlagSet("cdc "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	defPath := os.Getenv("CDC_CONFIG")
	if defPath == "" {
		defPath = "cdc.yaml"
	}
	path := fs.String("config", defPath, "configuration file")
	skipLSN := fs.String("lsn", "", "skip: the LSN of the row the relay stops at (from its error)")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	switch cmd {
	case "version", "--version", "-v":
		fmt.Fprintln(stdout, "cdc (walpost)", versionString())
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	case "run", "init", "status":
	case "skip":
		if *skipLSN == "" {
			fmt.Fprintln(stderr, "cdc skip: --lsn is required (the LSN named in the relay's error)")
			return 2
		}
	default:
		fmt.Fprintf(stderr, "cdc: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	cfg, err := config.Load(*path)
	if err != nil {
		fmt.Fprintln(stderr, "cdc:", err)
		return 2
	}
	// A second line of defence behind every error's own care: nothing
	// written to stdout or stderr (logs, errors, cdc status) carries a
	// secret of the config. The stdout sink writes os.Stdout itself.
	secrets := redact.NewSet(cfg.Secrets()...)
	stdout, stderr = secrets.Writer(stdout), secrets.Writer(stderr)
	log := newLogger(cfg.Log, stderr)
	// relay.New checks every sink's settings (no I/O): a mistake is a
	// configuration error whatever the command.
	reg := prometheus.NewRegistry()
	r, err := relay.New(cfg, log, relay.NewMetrics(reg))
	if err != nil {
		fmt.Fprintf(stderr, "cdc: config %s: %v\n", *path, err)
		return 2
	}
	defer r.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch cmd {
	case "run":
		r.ConfigPath = *path
		err = runRelay(ctx, cfg, log, reg, r)
		if err != nil {
			log.Error().Err(err).Msg("cdc run failed")
			return 1
		}
		return 0
	case "init":
		err = initCmd(ctx, cfg, log, stdout)
	case "status":
		err = statusCmd(ctx, cfg, stdout)
	case "skip":
		var lsn pglogrepl.LSN
		if lsn, err = pglogrepl.ParseLSN(*skipLSN); err != nil {
			fmt.Fprintf(stderr, "cdc skip: --lsn %q is not an LSN like 0/16B3748\n", *skipLSN)
			return 2
		}
		err = skipCmd(ctx, cfg, lsn, stdout)
	}
	if err != nil {
		log.Error().Err(err).Msg("cdc " + cmd + " failed")
		return 1
	}
	return 0
}

func versionString() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

func newLogger(c config.Log, w io.Writer) zerolog.Logger {
	lvl, _ := zerolog.ParseLevel(c.Level)
	if c.Format == "console" {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger()
}

func runRelay(ctx context.Context, cfg *config.Config, log zerolog.Logger, reg *prometheus.Registry, r *relay.Relay) error {
	if os.Getenv("GOMAXPROCS") == "" && *cfg.Relay.Procs > 0 {
		runtime.GOMAXPROCS(*cfg.Relay.Procs)
	}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if cfg.HTTP.Listen != "" {
		srv, err := serveHTTP(cfg.HTTP, reg, r)
		if err != nil {
			return err
		}
		defer srv.Close()
		paths := "/metrics /healthz /readyz"
		if cfg.HTTP.Pprof {
			paths += " /debug/pprof/"
		}
		log.Info().Str("listen", srv.Addr).Msg("http: " + paths)
	}
	log.Info().Int("procs", runtime.GOMAXPROCS(0)).Str("version", versionString()).Str("slot", cfg.Postgres.Slot).Str("table", cfg.Postgres.Table).Int("sinks", len(cfg.Sinks)).Msg("starting")
	warnInsecure(cfg, log)
	return r.Run(ctx)
}

// warnInsecure logs, at start, settings that expose the relay's traffic or
// internals: Postgres TLS that does not verify the server to a remote
// host, and profiling endpoints on a non-loopback address.
func warnInsecure(cfg *config.Config, log zerolog.Logger) {
	if pc, err := pgconnect.ReplicationConfig(cfg.Postgres.URL); err == nil {
		if why := pgconnect.Unverified(pc); why != "" {
			log.Warn().Str("postgres", pgconnect.Describe(pc)).
				Msgf("postgres.url: %s: a machine between the relay and %s can read and alter the outbox stream; use sslmode=verify-full (with sslrootcert) for a remote server", why, pc.Host)
		}
	}
	if cfg.HTTP.Pprof && cfg.HTTP.Listen != "" {
		host, _, err := net.SplitHostPort(cfg.HTTP.Listen)
		if err != nil || !pgconnect.IsLocal(host) {
			log.Warn().Str("listen", cfg.HTTP.Listen).
				Msg("http.pprof is on and http.listen is not a loopback address: anyone who reaches the port can profile the process and read its memory; listen on 127.0.0.1 or turn pprof off")
		}
	}
}

func serveHTTP(c config.HTTP, reg *prometheus.Registry, r *relay.Relay) (*http.Server, error) {
	mux := http.NewServeMux()
	if c.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
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

func initCmd(ctx context.Context, cfg *config.Config, log zerolog.Logger, stdout io.Writer) error {
	return relay.Setup(ctx, cfg, func(line string) { fmt.Fprintln(stdout, line) })
}

func skipCmd(ctx context.Context, cfg *config.Config, lsn pglogrepl.LSN, stdout io.Writer) error {
	sk, err := relay.Skip(ctx, cfg, lsn)
	if err != nil {
		return err
	}
	id := sk.ID
	if id == "" {
		id = "(no readable id)"
	}
	fmt.Fprintf(stdout, "parked message %s (lsn %s, commit %s) in %s: %v\nthe next cdc run goes past it; the row is kept there for repair\n",
		id, sk.LSN, sk.CommitLSN, cfg.Postgres.DeadLetterTable, sk.Err)
	return nil
}

func statusCmd(ctx context.Context, cfg *config.Config, stdout io.Writer) error {
	conn, err := pgconnect.Connect(ctx, cfg.Postgres.URL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	info, err := replication.ReadSlot(ctx, conn, cfg.Postgres.Slot)
	if err != nil {
		return err
	}
	if !info.Exists {
		fmt.Fprintf(stdout, "slot %s: missing (run cdc init)\ncurrent WAL: %s\n", cfg.Postgres.Slot, info.CurrentWAL)
		return errors.New("slot missing")
	}
	active := "no"
	if info.Active {
		active = fmt.Sprintf("yes (pid %d)", info.ActivePID)
	}
	fmt.Fprintf(stdout, "slot:          %s (plugin %s, database %s)\n", cfg.Postgres.Slot, info.Plugin, info.Database)
	fmt.Fprintf(stdout, "active:        %s\n", active)
	fmt.Fprintf(stdout, "confirmed LSN: %s\n", info.ConfirmedFlush)
	fmt.Fprintf(stdout, "current WAL:   %s\n", info.CurrentWAL)
	fmt.Fprintf(stdout, "lag:           %d bytes (current WAL - confirmed)\n", info.LagBytes)
	fmt.Fprintf(stdout, "retained WAL:  %d bytes (current WAL - restart LSN)\n", info.RetainedBytes)
	progress, err := store.LoadProgress(ctx, conn, store.TablesOf(cfg))
	if err != nil {
		return fmt.Errorf("reading sink progress: %w", err)
	}
	for _, s := range cfg.Sinks {
		p, ok := progress[s.Name]
		switch {
		case !ok:
			fmt.Fprintf(stdout, "sink %-8s  no progress saved yet\n", s.Name+":")
		case p.CommitLSN < info.ConfirmedFlush:
			fmt.Fprintf(stdout, "sink %-8s  acknowledged up to commit %s (at the slot)\n", s.Name+":", p.CommitLSN)
		default:
			fmt.Fprintf(stdout, "sink %-8s  acknowledged up to commit %s\n", s.Name+":", p.CommitLSN)
		}
	}
	var slowest string
	var min pglogrepl.LSN
	for _, s := range cfg.Sinks {
		if p, ok := progress[s.Name]; ok && (slowest == "" || p.CommitLSN < min) {
			slowest, min = s.Name, p.CommitLSN
		}
	}
	if len(cfg.Sinks) > 1 && slowest != "" && info.LagBytes > 0 {
		fmt.Fprintf(stdout, "slowest sink:  %s (the slot advances at its pace)\n", slowest)
	}
	parked, err := store.DeadLetterCounts(ctx, conn, store.TablesOf(cfg))
	if err != nil {
		return fmt.Errorf("reading the dead-letter table: %w", err)
	}
	if len(parked) > 0 {
		var parts []string
		total := 0
		for _, sink := range slices.Sorted(maps.Keys(parked)) {
			total += parked[sink]
			if sink == "" {
				parts = append(parts, fmt.Sprintf("rows that could not be mapped: %d", parked[sink]))
			} else {
				parts = append(parts, fmt.Sprintf("refused by sink %s: %d", sink, parked[sink]))
			}
		}
		fmt.Fprintf(stdout, "dead letters:  %d in %s (%s)\n", total, cfg.Postgres.DeadLetterTable, strings.Join(parts, ", "))
	}
	return nil
}
