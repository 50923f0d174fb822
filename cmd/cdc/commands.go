package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/admin"
	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/relay"
	"github.com/walpost/walpost/internal/store"
)

// options are one command line's flags and arguments. Each command binds
// the flags it takes to these fields (command.flags).
type options struct {
	config string        // --config, or the one argument; "" until resolved
	lsn    string        // skip: --lsn
	json   bool          // status: --json
	adopt  bool          // init: --adopt
	wait   time.Duration // init: --wait (initwait.go)
	args   []string      // the arguments that are not flags

	configs   []string // run and status: every --config, or the one file (several: docs/fleet.md)
	maxActive int      // run: --max-active, or $CDC_MAX_ACTIVE

	skipLSN pglogrepl.LSN // --lsn, parsed by skip's check
	skipSeq int64         // --lsn's :seq; -1 for none

	replayOptions  // replay and dead-letter (replay.go)
	recoverOptions // recover (recover.go)
}

// command is one of cdc's commands: its help (help.go) and how it runs.
type command struct {
	name    string
	summary string   // one line of the overview
	about   string   // what it does, for `cdc <name> --help`
	exits   []string // its exit codes, "N  meaning", for its help
	env     []envVar // what it reads of the environment besides the config's variables

	// withConfig: the command loads the configuration file (--config F,
	// or F as its one argument) and reads the CDC_* variables.
	withConfig bool
	// sources: --config may be given several times and name directories:
	// several sources in one process (cdc run, cdc status; sources.go).
	sources bool
	// argsUsage, when set, says the command takes arguments of its own
	// (cdc dead-letter list): the configuration is then --config F or
	// $CDC_CONFIG only, and the usage line ends with argsUsage.
	argsUsage string
	// trusts: the command reads walpost's state tables to decide what it
	// publishes, parks or skips (skip, recover, resync, replay; cdc
	// dead-letter through internal/ops, on its one connection): before it
	// runs, it refuses state tables, and triggers
	// on them or on the outbox, that no trusted role owns, as cdc init and
	// cdc run do (admin.CheckTrust; docs/security.md).
	trusts bool
	// structured: errors are logged as the config's log says (cdc run);
	// the other commands print them as one plain line on stderr.
	structured bool
	// logFormat: the command follows log.format when it is set (in the
	// file or CDC_LOG_FORMAT): with json its log, progress lines and
	// errors on stderr are JSON records; otherwise it writes for a person
	// (cdc replay, cdc dead-letter).
	logFormat bool
	// flags binds the command's own flags to o (nil: none). Adding a flag
	// is one line here, its usage string being its help, plus its field
	// in options.
	flags func(fs *flag.FlagSet, o *options)
	// required names the flags that must be given.
	required []string
	// check validates the flags before the configuration is loaded; its
	// error is a usage error (exit 2).
	check func(o *options) error
	// run runs a command that has a configuration; plain one that has
	// none (version, help) and returns the exit code.
	run   func(e *cmdEnv) error
	plain func(o *options, stdout, stderr io.Writer) int
}

// cmdEnv is what a command with a configuration runs with.
type cmdEnv struct {
	ctx    context.Context
	cfg    *config.Config
	opts   *options
	log    zerolog.Logger
	reg    *prometheus.Registry
	relay  *relay.Relay
	stdout io.Writer
	stderr io.Writer // progress and reports (cdc replay, cdc dead-letter)
}

// commands returns cdc's commands in the order the overview lists them.
func commands() []*command {
	return []*command{
		{name: "run", summary: "relay outbox messages until SIGINT/SIGTERM (creates nothing: run init first)",
			about: runAbout, exits: runExits, env: runEnv, withConfig: true, sources: true, structured: true, run: runCmd, check: checkRun,
			flags: func(fs *flag.FlagSet, o *options) {
				fs.IntVar(&o.maxActive, "max-active", 0, "with several sources: hold at most `N` of their slots at once and wait for the others as a standby that holds none (0: no limit; default $CDC_MAX_ACTIVE; docs/fleet.md)")
			}},
		{name: "init", summary: "create the outbox table (if missing), the publication, the slot, and the progress and dead-letter tables",
			about: initAbout, exits: initExits, withConfig: true, run: initCmd,
			flags: func(fs *flag.FlagSet, o *options) {
				fs.BoolVar(&o.adopt, "adopt", false, "when creating the slot, relay once the rows whose columns.sent_at is NULL (left unsent by the dispatcher walpost replaces); needs columns.sent_at and a new slot")
				fs.DurationVar(&o.wait, "wait", defaultInitWait, "retry a server that cannot be reached (not listening yet, starting up) for up to this `duration` (default "+defaultInitWait.String()+"), as cdc run does; 0: try once. A refused password, role or database fails at once")
			}},
		{name: "status", summary: "show the slot: confirmed LSN, lag, active or not, per-sink progress, parked messages",
			about: statusAbout, exits: statusExits, withConfig: true, sources: true, run: statusCmd,
			flags: func(fs *flag.FlagSet, o *options) {
				fs.BoolVar(&o.json, "json", false, "print one JSON object instead of text (its fields: docs/operations.md, \"cdc status\")")
			}},
		{name: "skip", summary: "--lsn X: park the one bad row a relay with on_invalid: stop stops at, so that the next run goes past it",
			about: skipAbout, exits: skipExits, withConfig: true, trusts: true, run: skipCmd, required: []string{"lsn"}, check: checkSkip,
			flags: func(fs *flag.FlagSet, o *options) {
				fs.StringVar(&o.lsn, "lsn", "", "the `LSN` of the row the relay stops at, as its error names it (e.g. 0/16B3748)")
			}},
		recoverCommand(),
		replayCommand(),
		resyncCommand(),
		deadLetterCommand(),
		{name: "version", summary: "print the version, VCS revision and Go version", about: versionAbout, plain: versionCmd},
		{name: "help", summary: "print this overview, or with a command's name that command's help", about: helpAbout, plain: helpCmd},
	}
}

// aliases are other spellings of commands.
var aliases = map[string]string{"-h": "help", "-help": "help", "--help": "help", "-v": "version", "-version": "version", "--version": "version"}

// lookup returns the command called name, or nil.
func lookup(name string) *command {
	if a, ok := aliases[name]; ok {
		name = a
	}
	for _, c := range commands() {
		if c.name == name {
			return c
		}
	}
	return nil
}

// flagSet returns the command's flags bound to o. It prints nothing: the
// caller reports errors in one line and prints help to stdout.
func (c *command) flagSet(o *options) *flag.FlagSet {
	fs := flag.NewFlagSet("cdc "+c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	switch {
	case c.withConfig && c.argsUsage != "":
		fs.StringVar(&o.config, "config", "", "the configuration `file` (default: $CDC_CONFIG, then ./cdc.yaml)")
	case c.withConfig && c.sources:
		fs.Var((*configFlag)(o), "config", "the configuration `file` (default: $CDC_CONFIG, then ./cdc.yaml); may also be given as the one argument; "+
			"given several times or naming a directory (its *.yaml and *.yml files), several sources in one process (docs/fleet.md)")
	case c.withConfig:
		fs.StringVar(&o.config, "config", "", "the configuration `file` (default: $CDC_CONFIG, then ./cdc.yaml); may also be given as the one argument")
	}
	if c.flags != nil {
		c.flags(fs, o)
	}
	return fs
}

// parse parses a command's flags and arguments; flags may come after
// arguments. It returns flag.ErrHelp for -h and --help, and a usage error
// otherwise.
func (c *command) parse(args []string) (*options, error) {
	o := &options{}
	fs := c.flagSet(o)
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			o.args = append(o.args, rest...)
			break
		}
		o.args, args = append(o.args, rest[0]), rest[1:]
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, name := range c.required {
		if !set[name] {
			_, usage := flag.UnquoteUsage(fs.Lookup(name))
			return nil, fmt.Errorf("--%s is required: %s", name, usage)
		}
	}
	if c.withConfig && c.argsUsage != "" {
		o.config = cmp.Or(o.config, os.Getenv("CDC_CONFIG"), "cdc.yaml")
	} else if c.withConfig {
		if err := o.resolveConfig(); err != nil {
			return nil, err
		}
	}
	if c.check != nil {
		if err := c.check(o); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// resolveConfig decides the configuration file: --config or the one
// argument (both: they must name the same file), else $CDC_CONFIG, else
// ./cdc.yaml. A second argument is an error, never ignored.
func (o *options) resolveConfig() error {
	switch {
	case len(o.configs) > 1 && len(o.args) > 0:
		return fmt.Errorf("several --config and the argument %s: give every source with --config", o.args[0])
	case len(o.args) > 1:
		return fmt.Errorf("one configuration file at most; got the arguments %s", quoteAll(o.args))
	case len(o.args) == 1 && o.config != "" && filepath.Clean(o.args[0]) != filepath.Clean(o.config):
		return fmt.Errorf("--config %s and the argument %s name two configuration files; give one", o.config, o.args[0])
	case len(o.args) == 1:
		o.config = o.args[0]
	case o.config == "":
		o.config = cmp.Or(os.Getenv("CDC_CONFIG"), "cdc.yaml")
	}
	if len(o.configs) <= 1 {
		o.configs = []string{o.config}
	}
	return nil
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, " ")
}

// checkSkip parses skip's --lsn: an LSN, or LSN:seq for one row of a
// multi-row insert (store.ParseAt).
func checkSkip(o *options) error {
	lsn, seq, ok := store.ParseAt(o.lsn)
	if !ok {
		return fmt.Errorf("--lsn %q is not an LSN like 0/16B3748, or 0/16B3748:2 for one row of a multi-row insert (take it from the relay's error)", o.lsn)
	}
	o.skipLSN, o.skipSeq = lsn, seq
	return nil
}

// unusedSettings names the settings the command does not use: a ${VAR}
// in them may be unset (config.LoadFor). cdc init, status and skip, and
// dead-letter list, show and drop talk to PostgreSQL only; replay,
// recover, resync and dead-letter resend publish, but serve no HTTP; cdc
// run uses everything. docs/operations.md, "What each command needs".
func unusedSettings(cmd *command, o *options) []string {
	pgOnly := []string{"sinks", "relay.claim_check", "http"}
	switch cmd.name {
	case "init", "status", "skip":
		return pgOnly
	case "dead-letter":
		if len(o.args) > 0 && o.args[0] == "resend" {
			return []string{"http"}
		}
		return pgOnly
	case "run":
		return nil
	}
	return []string{"http"}
}

func initCmd(e *cmdEnv) error {
	err := retryUnreachable(e.ctx, e.cfg, e.opts.wait, e.log, func(ctx context.Context) error {
		return admin.SetupWith(ctx, e.cfg, admin.SetupOptions{Adopt: e.opts.adopt,
			Warn: func(w string) { fmt.Fprintln(e.stderr, "warning: "+w) }}, func(line string) { fmt.Fprintln(e.stdout, line) })
	})
	if admin.IsSetupConfigError(err) {
		return &exitCode{err, usageExitCode} // nothing was done
	}
	return err
}

func skipCmd(e *cmdEnv) error {
	cfg := e.cfg
	sk, err := admin.Skip(e.ctx, cfg, e.opts.skipLSN, e.opts.skipSeq)
	if err != nil {
		return err
	}
	id := sk.ID
	if id == "" {
		id = "(no readable id)"
	}
	fmt.Fprintf(e.stdout, "parked message %s (lsn %s, commit %s) in %s: %v\nthe next cdc run goes past it; the row is kept there for repair\n",
		id, store.FormatAt(sk.LSN, sk.Seq), sk.CommitLSN, cfg.Postgres.DeadLetterTable, sk.Err)
	return nil
}
