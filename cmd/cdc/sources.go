package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/console"
	"github.com/walpost/walpost/internal/fleet"
	"github.com/walpost/walpost/internal/redact"
	"github.com/walpost/walpost/internal/relay"
	"github.com/walpost/walpost/internal/tracing"
)

// checkRun reads $CDC_MAX_ACTIVE when --max-active is not given.
func checkRun(o *options) error {
	if v := os.Getenv("CDC_MAX_ACTIVE"); v != "" && o.maxActive == 0 {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("CDC_MAX_ACTIVE=%q is not a whole number", v)
		}
		o.maxActive = n
	}
	if o.maxActive < 0 {
		return fmt.Errorf("--max-active %d: want 0 (no limit) or more", o.maxActive)
	}
	return nil
}

// configFlag is --config of the commands that take several sources: each
// use adds a file or a directory.
type configFlag options

func (c *configFlag) String() string { return c.config }

func (c *configFlag) Set(v string) error {
	c.configs = append(c.configs, v)
	c.config = c.configs[0]
	return nil
}

// runSources runs cdc run or cdc status on several sources (internal/fleet,
// docs/fleet.md). A configuration error of any source is one of the whole
// command (exit 2): nothing starts.
func runSources(cmd *command, o *options, stdout, stderr io.Writer) int {
	sources, err := fleet.Load(o.configs, unusedSettings(cmd, o)...)
	if err != nil {
		fmt.Fprintf(stderr, "cdc %s: %v\n", cmd.name, err)
		return 2
	}
	var secrets []string
	for _, s := range sources {
		secrets = append(secrets, s.Config.Secrets()...)
	}
	set := redact.NewSet(secrets...)
	color := colorful(stderr)
	stdout, stderr = set.Writer(stdout), set.Writer(stderr)
	// SIGINT and SIGTERM stay caught until the process exits (stop is
	// never called): a signal that comes after the command ended, while
	// the process exits (make demo sends SIGTERM after Ctrl-C), must not
	// kill with the default action a process that stopped cleanly.
	ctx, _ := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	if cmd.name == "status" {
		return statusSources(ctx, sources, o, stdout, stderr)
	}
	return runFleet(ctx, sources, o, set, stderr, color)
}

// runFleet is cdc run of several sources: each its own relay, one HTTP
// listener, one log and one tracing provider for all, until
// SIGINT/SIGTERM.
func runFleet(ctx context.Context, sources []fleet.Source, o *options, set *redact.Set, stderr io.Writer, color bool) int {
	shared, err := fleet.SharedOf(sources)
	if err != nil {
		fmt.Fprintf(stderr, "cdc run: %v\n", err)
		return 2
	}
	log := newLogger(shared.Log, stderr, color)
	reg := prometheus.NewRegistry()
	b := readBuild()
	// One provider for the process; each source's relay records with it,
	// naming its source (fleet.Options.Tracing).
	tp, ctx, stopTracing, err := tracing.Start(ctx, shared.Tracing, b.version, reg, log)
	if err != nil {
		fmt.Fprintf(stderr, "cdc run: tracing: %v\n", err)
		return 2
	}
	defer stopTracing()
	f, err := fleet.New(sources, fleet.Options{MaxActive: o.maxActive, Log: log, Registry: reg, Redact: set.Redact, Tracing: tp})
	if err != nil {
		fmt.Fprintf(stderr, "cdc run: %v\n", err)
		return 2
	}
	if os.Getenv("GOMAXPROCS") == "" && shared.Procs > 0 {
		runtime.GOMAXPROCS(shared.Procs)
	}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	relay.RegisterBuildInfo(reg, b.version, b.revisionLabel())
	if shared.HTTP.Listen != "" {
		var cs []console.Source
		for _, s := range sources {
			cs = append(cs, console.Source{Name: s.Name, Config: s.Config, Sinks: f.Lent(s.Name), Tracing: tp.WithSource(s.Name)})
		}
		consoleCtx, stopConsole := context.WithCancel(ctx)
		defer stopConsole()
		routes, err := consoleRoutes(consoleCtx, shared.HTTP, console.Options{Sources: cs, Gatherer: reg, Fleet: f.Report, Log: log, Redact: set.Redact})
		if err != nil {
			log.Error().Err(err).Msg("cdc run failed")
			return 1
		}
		srv, err := serveHTTP(shared.HTTP, reg, f, append(routes, route{"/sources", f.SourcesHandler(), false})...)
		if err != nil {
			log.Error().Err(err).Msg("cdc run failed")
			return 1
		}
		defer srv.Close()
		paths := "/metrics /healthz /readyz /sources"
		if shared.HTTP.Pprof {
			paths += " /debug/pprof/"
		}
		if shared.HTTP.Console {
			paths += " " + console.Paths
		}
		log.Info().Str("listen", srv.Addr).Bool("auth", shared.HTTP.Auth != nil).Msg("http: " + paths)
	}
	log.Info().Int("sources", len(sources)).Int("max_active", o.maxActive).Int("procs", runtime.GOMAXPROCS(0)).
		Str("version", b.version).Str("revision", b.revisionLabel()).Msg("starting")
	for i, s := range sources {
		c := *s.Config
		c.HTTP = config.HTTP{}
		if i == 0 {
			c.HTTP = shared.HTTP // once: the process's listener
		}
		warnInsecure(&c, log.With().Str("source", s.Name).Logger())
		warnDeprecated(&c, log.With().Str("source", s.Name).Logger())
	}
	err = f.Run(ctx)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, relay.ErrDrainCut):
		log.Error().Err(err).Msg("cdc run failed")
		return drainCutExit
	}
	log.Error().Err(err).Msg("cdc run failed")
	return 1
}

// sourceStatus is one source of cdc status --json on several sources.
type sourceStatus struct {
	Source string          `json:"source"`
	Config string          `json:"config"`
	Status json.RawMessage `json:"status"` // cdc status --json of the source; null when it could not be read
	Error  *string         `json:"error"`  // why cdc status of the source exits 1
}

// statusSources is cdc status on several sources: each source's status
// (text: under a line naming it; --json: one object {"sources": […]}),
// exit 1 when any source's would, else 4 when any holds a key.
func statusSources(ctx context.Context, sources []fleet.Source, o *options, stdout, stderr io.Writer) int {
	code := 0
	var all []sourceStatus
	for i, s := range sources {
		opts := *o
		opts.config, opts.configs = s.Path, []string{s.Path}
		var out bytes.Buffer
		e := &cmdEnv{ctx: ctx, cfg: s.Config, opts: &opts, log: zerolog.Nop(), stdout: &out, stderr: stderr}
		if !o.json {
			if i > 0 {
				fmt.Fprintln(stdout)
			}
			fmt.Fprintf(stdout, "== source %s (%s)\n", s.Name, s.Path)
			e.stdout = stdout
		}
		err := statusCmd(e)
		st := sourceStatus{Source: s.Name, Config: s.Path, Status: json.RawMessage("null")}
		if out.Len() > 0 {
			st.Status = json.RawMessage(bytes.TrimSpace(out.Bytes()))
		}
		if ec := (*exitCode)(nil); errors.As(err, &ec) && ec.code == heldExit {
			if code == 0 { // 1, a source that failed, wins over keys held
				code = heldExit
			}
		} else if err != nil {
			code = 1
		}
		if err != nil {
			msg := err.Error()
			st.Error = &msg
			if !o.json {
				fmt.Fprintf(stderr, "cdc status: source %s: %v\n", s.Name, err)
			}
		}
		all = append(all, st)
	}
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(map[string]any{"sources": all}); err != nil {
			fmt.Fprintf(stderr, "cdc status: %v\n", err)
			return 1
		}
	}
	return code
}
