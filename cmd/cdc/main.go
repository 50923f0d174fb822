// Command cdc is the walpost relay: it streams outbox INSERTs out of
// PostgreSQL logical replication to brokers, confirming the slot only after
// every sink acknowledged.
//
//	cdc run    [--config F]            relay until SIGINT/SIGTERM (graceful drain)
//	cdc init   [--config F]            create the outbox table (if missing), publication, slot and state tables
//	cdc status [--config F] [--json]   slot, confirmed LSN, lag, active or not, sinks, parked messages
//	cdc skip   [--config F] --lsn X    park the one bad row a relay stops at
//	cdc recover [--config F] [--since D|T] [--margin D]   replace a lost slot, relay again the rows not proven delivered
//	cdc replay [--config F] --since D | --from-id X --to-id Y [--sink S]   publish outbox rows again
//	cdc resync [--config F] [--since D]     relay from the table what the slot skips, move the slot to now
//	cdc dead-letter [--config F] list | show ID | resend ID… | resend --all | drop ID…
//	cdc version
//	cdc help [command]                 also cdc <command> --help
//
// The configuration file may also be given as the one argument (cdc run
// other.yaml); with --config too, both must name the same file.
//
// Exit codes: 0 after a clean stop, 1 on a runtime error, 2 on a usage or
// configuration error; cdc run also 3 when relay.shutdown_timeout cut its
// drain, cdc replay 130 when interrupted.
//
// The files: main.go dispatches; commands.go holds the command table and
// parses each command's own flags (and runs cdc init and cdc skip);
// help.go the help texts; runcmd.go is cdc run; status.go cdc status;
// recover.go cdc recover; resync.go cdc resync; replay.go cdc replay;
// deadletter.go cdc dead-letter; http.go the /metrics, /healthz, /readyz
// listener and its authentication; version.go the version and VCS
// revision. They parse, print and choose exit codes; each command's logic
// is in one package:
//
//	run                                 internal/relay
//	init, status, skip, recover, resync internal/admin
//	replay, dead-letter                 internal/replay
//
// docs/operations.md ("Commands") documents the commands for users.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/walpost/walpost/internal/admin"
	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/fleet"
	"github.com/walpost/walpost/internal/pgconnect"
	_ "github.com/walpost/walpost/internal/publish/claimcheck" // relay.claim_check, a sink's claim_check
	_ "github.com/walpost/walpost/internal/publish/file"       // registers kinds: file, stdout, discard
	_ "github.com/walpost/walpost/internal/publish/kafka"      // registers kind: kafka
	_ "github.com/walpost/walpost/internal/publish/natsjs"     // registers kind: nats
	_ "github.com/walpost/walpost/internal/publish/rabbitmq"   // registers kind: rabbitmq
	_ "github.com/walpost/walpost/internal/publish/servicebus" // registers kind: servicebus
	_ "github.com/walpost/walpost/internal/publish/webhook"    // registers kind: webhook
	"github.com/walpost/walpost/internal/redact"
	"github.com/walpost/walpost/internal/relay"
	"github.com/walpost/walpost/internal/tracing"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// traced are the commands that publish, and so record publish spans when
// tracing is on (tracing:; docs/operations.md, "Tracing"; tracing.Start).
var traced = map[string]bool{"run": true, "replay": true, "dead-letter": true}

// run runs the command line args and returns the exit code. Usage and
// help go to stdout when asked for, to stderr with exit 2 when the command
// line is wrong.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		printOverview(stderr)
		return 2
	}
	cmd := lookup(args[0])
	if cmd == nil {
		fmt.Fprintf(stderr, "cdc: unknown command %q (see 'cdc help')\n", args[0])
		return 2
	}
	o, err := cmd.parse(args[1:])
	switch {
	case errors.Is(err, flag.ErrHelp):
		printHelp(stdout, cmd)
		return 0
	case err != nil:
		fmt.Fprintf(stderr, "cdc %s: %v (see 'cdc %s --help')\n", cmd.name, err, cmd.name)
		return 2
	}
	if cmd.plain != nil {
		return cmd.plain(o, stdout, stderr)
	}
	if cmd.sources && fleet.IsMulti(o.configs) { // several sources: sources.go [fleet hook]
		return runSources(cmd, o, stdout, stderr)
	}
	return runWithConfig(cmd, o, stdout, stderr)
}

// runWithConfig loads the configuration and runs cmd with it. Errors of
// cdc run are logged as log.format says; the other commands' are one
// plain line on stderr: "cdc status: …".
func runWithConfig(cmd *command, o *options, stdout, stderr io.Writer) int {
	cfg, err := config.LoadFor(o.config, unusedSettings(cmd, o)...)
	if err != nil {
		fmt.Fprintf(stderr, "cdc %s: %v\n", cmd.name, err)
		return 2
	}
	// A second line of defence behind every error's own care: nothing
	// written to stdout or stderr (logs, errors, cdc status) carries a
	// secret of the config. The stdout sink writes os.Stdout itself.
	secrets := redact.NewSet(cfg.Secrets()...)
	color := colorful(stderr)
	stdout, stderr = secrets.Writer(stdout), secrets.Writer(stderr)
	logCfg := cfg.Log
	structured := cmd.structured || cmd.logFormat && cfg.IsSet("log.format") && cfg.Log.Format == "json"
	if !structured {
		logCfg.Format = "console" // a person reads it
	}
	log := newLogger(logCfg, stderr, color)
	// relay.New checks every sink's settings (no I/O): a mistake is a
	// configuration error whatever the command.
	reg := prometheus.NewRegistry()
	r, err := relay.New(cfg, log, relay.NewMetrics(reg))
	if err != nil {
		fmt.Fprintf(stderr, "cdc %s: config %s: %v\n", cmd.name, o.config, err)
		return 2
	}
	if structured && !cmd.structured {
		stderr = &lineLogger{log: log} // progress and reports as records
	}
	// SIGINT and SIGTERM stay caught until the process exits (stop is
	// never called): a signal that comes after the command ended, while
	// the process exits (make demo sends SIGTERM after Ctrl-C), must not
	// kill with the default action a process that stopped cleanly.
	ctx, _ := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer r.Close()
	stopTracing := func() {}
	if traced[cmd.name] { // the relay's runners and the resends record spans
		if r.Tracing, ctx, stopTracing, err = tracing.Start(ctx, cfg.Tracing, readBuild().version, reg, log); err != nil {
			fmt.Fprintf(stderr, "cdc %s: config %s: tracing: %v\n", cmd.name, o.config, err)
			return 2
		}
	}
	defer stopTracing()
	if cmd.trusts {
		err = admin.CheckTrust(ctx, cfg)
	}
	if err == nil {
		err = cmd.run(&cmdEnv{ctx: ctx, cfg: cfg, opts: o, log: log, reg: reg, relay: r, stdout: stdout, stderr: stderr})
	}
	err = pgconnect.ExplainRefused(err) // the server's refusal first, and what to fix
	switch {
	case err == nil:
		return 0
	case structured:
		log.Error().Err(err).Msg("cdc " + cmd.name + " failed")
	default:
		fmt.Fprintf(stderr, "cdc %s: %v\n", cmd.name, err)
	}
	if ec := (*exitCode)(nil); errors.As(err, &ec) {
		return ec.code // cdc replay interrupted: 130 (replay.go)
	}
	return 1
}
