package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// envVar is an environment variable a command reads, for its help.
type envVar struct{ name, what string }

// configEnv are the variables every command with a configuration reads.
// The CDC_* overrides are internal/config's (config.go, envVars); a test
// keeps this list and that one the same.
var configEnv = []envVar{
	{"CDC_CONFIG", "the configuration file when neither --config nor an argument names one (default ./cdc.yaml)"},
	{"CDC_POSTGRES_URL", "overrides postgres.url"},
	{"CDC_POSTGRES_PRIMARY_URL", "overrides postgres.primary_url (the primary, when postgres.url is a standby)"},
	{"CDC_POSTGRES_TABLE", "overrides postgres.table"},
	{"CDC_POSTGRES_PUBLICATION", "overrides postgres.publication"},
	{"CDC_POSTGRES_SLOT", "overrides postgres.slot"},
	{"CDC_HTTP_LISTEN", "overrides http.listen"},
	{"CDC_LOG_LEVEL", "overrides log.level"},
	{"CDC_LOG_FORMAT", "overrides log.format"},
	{"CDC_RELAY_WINDOW_MESSAGES", "overrides relay.window_messages"},
	{"${VAR}", "any variable the file refers to as ${VAR} or ${VAR:-default}"},
	{"PG*", "PGPASSWORD, PGPASSFILE, PGSSLROOTCERT and libpq's other variables fill in what postgres.url leaves out"},
}

var runEnv = []envVar{
	{"GOMAXPROCS", "how many threads run Go code at once; wins over relay.procs"},
	{"CDC_MAX_ACTIVE", "--max-active when the flag is not given"},
	{"CDC_CONSOLE_SAMPLE_EVERY", "how often the console samples the slot's lag for its chart (default 30s)"},
	{"OTEL_TRACES_EXPORTER", "otlp turns tracing on without a tracing: block, none turns it off; the other OTEL_* variables fill what tracing: leaves out (docs/operations.md, \"Tracing\")"},
}

const usageExit = "2  usage or configuration error (nothing was done)"

const runAbout = `Relay the outbox: check the server (read-only: run creates nothing, run
init first), wait for the slot (a second instance on the same config waits
as a hot standby), and stream every committed outbox row to the sinks,
confirming the slot only after every sink acknowledged. SIGINT or SIGTERM
stop reading, drain, confirm and exit 0 (3 when relay.shutdown_timeout cut
the drain short). Logs are
structured (log.format) on stderr; http.listen serves /metrics, /healthz
and /readyz, and with http.console the operator's console at /console/
and its API under /api/v1/ (docs/operations.md, "Console").

Several sources (--config given several times, or a directory of config
files) run in one process, each isolated, with --max-active bounding the
slots it holds; identical instances share them (docs/fleet.md).`

var runExits = []string{"0  stopped cleanly after SIGINT/SIGTERM: everything read was delivered and confirmed",
	"1  a runtime error (logged)", usageExit,
	"3  stopped after SIGINT/SIGTERM, but relay.shutdown_timeout cut the drain: nothing is lost; the deliveries in flight are sent again by the next run"}

const initAbout = `Create what the relay needs, as a role that may (the outbox table's owner,
with REPLICATION): the outbox table (default layout, if missing), the
publication, the slot, and the progress, dead-letter and coverage tables
(the coverage table records what publishes the outbox). What exists
already is kept. Run it once before the first application write; or, to
replace a polling dispatcher that marks rows sent (columns.sent_at), stop
the dispatcher and run it with --adopt: the rows still unsent are then
relayed once, before what is committed after the slot.`

var initExits = []string{"0  everything exists", "1  something could not be created (the error says what to do)", usageExit}

const statusAbout = `Show the replication slot: its plugin and database, whether a relay holds
it, the confirmed LSN, the lag and the WAL it retains (in binary units:
KiB, MiB, GiB; --json gives exact bytes), each sink's acknowledged position
and the parked messages, with a warning when cdc run would refuse the slot
(another plugin than pgoutput, another database than postgres.url's, or
invalidated by the server: wal_status lost, for cdc recover) and when the
slot is in danger (wal_status unreserved: beyond max_slot_wal_keep_size).`

var statusExits = []string{"0  the slot exists and cdc run can use it (wal_status unreserved is a warning only)",
	"1  the slot is missing or unusable (invalidated: wal_status lost; another plugin or database; or not a failover slot with postgres.failover_slot), or the server could not be read", usageExit,
	"4  nothing above, but keys are held (relay.on_invalid or on_refused: hold_key): their messages wait for an operator (held_keys)"}

const skipAbout = `Park in the dead-letter table the one row a relay with relay.on_invalid:
stop stops at, so that the next cdc run goes past it. Stop every relay on
the slot first; skip refuses any other LSN than the row's, and a slot in use.`

var skipExits = []string{"0  the row is parked", "1  refused (another LSN, the slot in use) or failed", usageExit}

const versionAbout = `Print the version (set with -ldflags "-X main.version=v1.2.3", else the
module's), the VCS revision it was built from ("+dirty": with uncommitted
changes; "(unknown revision)" for a build without VCS information), and
the Go version.`

const helpAbout = `Print the overview of the commands, or with a command's name that
command's help (the same as cdc <command> --help).`

// printOverview prints the list of commands.
func printOverview(w io.Writer) {
	fmt.Fprint(w, "usage: cdc <command> [flags] [config file]\n\ncommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-11s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `
Exit codes: 0 success, 1 runtime error, 2 usage or configuration error;
cdc run 3 when relay.shutdown_timeout cut its drain (nothing lost: the next
run sends again what was in flight), cdc status 4 when keys are held,
cdc replay 130 when interrupted.
The config file is --config F or the one argument F, else $CDC_CONFIG, else
./cdc.yaml. Run 'cdc <command> --help' for a command's flags, exit codes and
environment variables.
`)
}

// printHelp prints a command's help: usage line, what it does, flags, exit
// codes and environment.
func printHelp(w io.Writer, c *command) {
	fs := c.flagSet(&options{})
	fmt.Fprintf(w, "usage: %s\n\n%s\n\nflags:\n", c.synopsis(fs), c.about)
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		fmt.Fprintf(w, "  %-16s %s\n", strings.TrimSpace("--"+f.Name+" "+name), usage)
	})
	fmt.Fprintf(w, "  %-16s %s\n", "-h, --help", "print this help")
	fmt.Fprint(w, "\nexit codes:\n")
	exits := c.exits
	if exits == nil {
		exits = []string{"0  printed", usageExit}
	}
	for _, e := range exits {
		fmt.Fprintf(w, "  %s\n", e)
	}
	env := c.env
	if c.withConfig {
		env = append(append([]envVar(nil), configEnv...), env...)
	}
	if len(env) > 0 {
		fmt.Fprint(w, "\nenvironment:\n")
		for _, v := range env {
			fmt.Fprintf(w, "  %-26s %s\n", v.name, v.what)
		}
	}
}

// synopsis is the usage line, from the command's flags.
func (c *command) synopsis(fs *flag.FlagSet) string {
	parts := []string{"cdc", c.name}
	fs.VisitAll(func(f *flag.Flag) {
		name, _ := flag.UnquoteUsage(f)
		p := strings.TrimSpace("--" + f.Name + " " + name)
		if !slices.Contains(c.required, f.Name) {
			p = "[" + p + "]"
		}
		parts = append(parts, p)
	})
	switch {
	case c.argsUsage != "":
		parts = append(parts, c.argsUsage)
	case c.withConfig:
		parts = append(parts, "[file]")
	case c.name == "help":
		parts = append(parts, "[command]")
	}
	return strings.Join(parts, " ")
}

// helpCmd is cdc help [command].
func helpCmd(o *options, stdout, stderr io.Writer) int {
	switch len(o.args) {
	case 0:
		printOverview(stdout)
		return 0
	case 1:
		if c := lookup(o.args[0]); c != nil {
			printHelp(stdout, c)
			return 0
		}
		fmt.Fprintf(stderr, "cdc help: unknown command %q (see 'cdc help')\n", o.args[0])
	default:
		fmt.Fprintf(stderr, "cdc help: one command at most; got %s\n", quoteAll(o.args))
	}
	return 2
}
