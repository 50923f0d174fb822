package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/walpost/walpost/internal/layout"
	"github.com/walpost/walpost/internal/sqlident"
)

// Config is the whole configuration file.
type Config struct {
	Postgres Postgres `yaml:"postgres"`
	Columns  Columns  `yaml:"columns"`
	Relay    Relay    `yaml:"relay"`
	Sinks    []Sink   `yaml:"sinks"`
	HTTP     HTTP     `yaml:"http"`
	Log      Log      `yaml:"log"`
	// Tracing configures OpenTelemetry spans (config/tracing.go); nil
	// when the file has no tracing: block.
	Tracing *Tracing `yaml:"tracing"`

	// src is where each setting's value came from, by field path, for
	// errors (Validate); empty for a Config not made by Parse.
	src map[string]source
	// unresolved are the fields left empty for an unset ${VAR} that the
	// command does not use (LoadFor).
	unresolved []string
}

// Postgres says where the outbox is and how it is replicated.
type Postgres struct {
	// URL is a libpq connection URL or key/value string. The replication
	// connection adds replication=database itself.
	URL string `yaml:"url"`
	// PrimaryURL, when set, says that URL is a physical standby
	// (PostgreSQL 16+) whose slot the relay reads: the outbox, the
	// publication and walpost's state tables live on this primary, and
	// every write (progress, dead letters, heartbeats, sent_at,
	// retention) and cdc init's DDL go here (StateURL). Unset: everything
	// is on URL (docs/operations.md, "Decoding from a standby").
	PrimaryURL string `yaml:"primary_url"`
	// Table is the outbox table, schema-qualified (default public.outbox).
	Table string `yaml:"table"`
	// Source is where the messages come from: "table" (default), the
	// INSERTs into Table; or "messages", a table-less outbox: the
	// application emits each message with pg_logical_emit_message(true,
	// MessagePrefix, envelope) in its transaction (outbox.Emit; source.go).
	Source string `yaml:"source"`
	// MessagePrefix is the prefix of the table-less outbox's logical
	// messages (default walpost); only with source: messages.
	MessagePrefix string `yaml:"message_prefix"`
	// MessageKeys, with source: messages, makes the relay publish only
	// envelopes signed with one of these keys (outbox.SigningKey; each at
	// least 16 bytes): any other message with the prefix is parked in the
	// dead-letter table, never published. Several keys let a key be
	// replaced without a stop. Secrets: never printed.
	MessageKeys []string `yaml:"message_keys"`
	// MessageRoles: `cdc init` revokes EXECUTE on pg_logical_emit_message
	// from PUBLIC and grants it to these roles (with source: messages the
	// producers'; the relay's for its heartbeat, and the role of cdc init
	// --adopt and cdc recover for adopt messages); it needs a superuser.
	// Unset, any role that can connect may write a message.
	MessageRoles []string `yaml:"message_roles"`
	// Publication is created FOR TABLE <table> WITH (publish = 'insert')
	// when missing, empty with source: messages (default walpost_outbox).
	Publication string `yaml:"publication"`
	// Slot is the pgoutput logical replication slot (default walpost_outbox).
	Slot string `yaml:"slot"`
	// StatusInterval is the longest time between two standby status
	// updates (default 10s).
	StatusInterval Duration `yaml:"status_interval"`
	// HeartbeatInterval: when the server sent nothing for this long, the
	// relay writes a tiny non-transactional logical message
	// (pg_logical_emit_message) so that the slot can advance past WAL of
	// unrelated tables. 0 disables it (default 10s).
	HeartbeatInterval *Duration `yaml:"heartbeat_interval"`
	// StateSchema is the schema of walpost's state tables: the progress,
	// dead-letter, adopt, coverage and retention marks tables are
	// STATE_SCHEMA.walpost_sink_progress, .walpost_dead_letter,
	// .walpost_adopt, .walpost_coverage and .walpost_retention_marks
	// (default public). The five keys that name them one by one are
	// deprecated (Deprecations).
	StateSchema string `yaml:"state_schema"`
	// ProgressTable keeps each sink's last acknowledged position, so that
	// after a restart a sink that was ahead of the slot does not get
	// messages again (default public.walpost_sink_progress; "-" disables).
	ProgressTable string `yaml:"progress_table"`
	// DeadLetterTable receives rows that cannot be mapped to a message
	// when relay.on_invalid is dead_letter, and messages a sink refuses
	// for good when relay.on_refused is dead_letter (default
	// public.walpost_dead_letter; created when missing).
	DeadLetterTable string `yaml:"dead_letter_table"`
	// AdoptTable records the transactions of `cdc init --adopt` and `cdc
	// recover`, the only ones whose adopt messages the relay takes for
	// rows (default public.walpost_adopt; created by cdc init; see
	// docs/security.md).
	AdoptTable string `yaml:"adopt_table"`
	// CoverageTable keeps, per slot, what made the publication cover the
	// outbox when the relay last verified it, and any stretch the stream
	// may not have carried (docs/design.md, "The publication or the table
	// changing under the relay"; default public.walpost_coverage, created
	// by cdc init; "-" keeps it in memory only).
	CoverageTable string `yaml:"coverage_table"`
	// TrustedOwners are roles, besides those walpost trusts by itself,
	// that may own the state tables and the functions of their triggers
	// (and of the outbox's, where the relay updates or deletes its rows):
	// cdc init and cdc run refuse an object owned by any other role
	// (store.CheckOwners; docs/security.md, "State tables: who owns
	// them"). Names as in the catalog, no case folding; default none.
	TrustedOwners []string `yaml:"trusted_owners"`
	// GapMargin is the longest a transaction takes from setting its row's
	// time (columns.time, else created_at) to committing: rows the stream
	// may not have carried are looked for from this long before the
	// stretch (default 1m).
	GapMargin Duration `yaml:"gap_margin"`
	// ReconnectBackoff is the longest wait between reconnect attempts
	// (default 30s; attempts start at 250ms and double).
	ReconnectBackoff Duration `yaml:"reconnect_backoff"`
	// StandbyPoll is how often an instance waiting for the slot (a hot
	// standby: another process holds it) tries to take it, jittered by
	// ±25% (default 1s; 100ms to 1m). Each try opens a replication
	// connection.
	StandbyPoll Duration `yaml:"standby_poll"`
	// FailoverSlot makes cdc init create the slot with failover = true
	// (PostgreSQL 17+), so that standbys with sync_replication_slots = on
	// keep a copy a promoted standby streams from; refused by cdc init and
	// cdc run on older servers, and checked by cdc run (default false).
	FailoverSlot bool `yaml:"failover_slot"`
	// ReceiveBuffer is deprecated (issue 34; a warning at start when
	// set): it sized the replication socket's receive buffer (SO_RCVBUF).
	// "auto" (default) and "kernel" both leave it to the kernel's
	// autotuning; a number of bytes (65536 to 67108864: a smaller window
	// can stay under one TCP segment and stall the stream) is still
	// honoured. (Until issue 24, auto set 64 KiB on links with a round
	// trip of at most 250 µs; two full bench runs showed no gain from it;
	// docs/design.md, "Reading a backlog".)
	ReceiveBuffer string `yaml:"receive_buffer"`
	// MaxMessageBytes is the largest change (a row's INSERT, a logical
	// message) the relay reads into memory from the replication stream
	// (default 67108864, 64 MiB; 1048576 to 1073741824). A larger one is
	// read past without being held: a logical message of another prefix
	// is ignored as before, an outbox row or a message of the relay's own
	// prefix is a bad row (relay.on_invalid; under message_keys parked as
	// a forged one). docs/design.md, "Messages larger than
	// max_message_bytes".
	MaxMessageBytes int `yaml:"max_message_bytes"`
}

// ReceiveBufferBytes is postgres.receive_buffer as
// replication.StreamOptions.ReceiveBuffer takes it: 0 (the kernel's
// sizing) for auto and kernel, else the size. The config must be valid.
func (p *Postgres) ReceiveBufferBytes() int {
	n, err := strconv.Atoi(p.ReceiveBuffer)
	if err != nil {
		return 0 // auto, kernel
	}
	return n
}

// The words postgres.receive_buffer (deprecated) takes besides a size;
// both mean the kernel's sizing.
const (
	ReceiveBufferAuto   = "auto"
	ReceiveBufferKernel = "kernel"
)

// Policy says what happens to a row that cannot be mapped (relay.on_invalid)
// or a message a sink refuses for good (relay.on_refused).
type Policy string

// The policies.
const (
	// Stop stops the relay with an error naming the row or message, having
	// delivered and confirmed everything before it.
	Stop Policy = "stop"
	// DeadLetter parks the row or message in postgres.dead_letter_table and
	// goes on.
	DeadLetter Policy = "dead_letter"
	// HoldKey parks the row or message like DeadLetter, and every later
	// message of its ordering key behind it, while the other keys flow;
	// `cdc dead-letter resend` or `drop` of the parked one releases the
	// key in order (docs/design.md, "Held keys").
	HoldKey Policy = "hold_key"
)

// ExpiredPolicy says what happens to a message that expired before the
// relay reached it (relay.on_expired).
type ExpiredPolicy string

// The relay.on_expired policies.
const (
	ExpiredDrop       ExpiredPolicy = "drop"
	ExpiredDeadLetter ExpiredPolicy = "dead_letter"
	ExpiredSend       ExpiredPolicy = "send"
)

// Parks reports whether p parks what it applies to (dead_letter or
// hold_key) rather than stopping.
func (p Policy) Parks() bool { return p == DeadLetter || p == HoldKey }

// DeadLetters reports whether a policy parks messages, so that the
// dead-letter table must be writable.
func (r Relay) DeadLetters() bool {
	return r.OnInvalid.Parks() || r.OnRefused.Parks() || r.OnExpired == ExpiredDeadLetter
}

// Columns maps the outbox's roles to the table's column names.
type Columns struct {
	ID      string `yaml:"id"`
	Type    string `yaml:"type"`
	Key     string `yaml:"key"`
	Payload string `yaml:"payload"`
	Headers string `yaml:"headers"`
	// Time, when set, is a timestamp column whose value is the message's
	// time (Kafka record timestamp, CloudEvents time); unset, the commit
	// time is.
	Time string `yaml:"time"`
	// SentAt, when set, is a nullable timestamp column the relay fills in
	// (batched UPDATEs, off the hot path) once every sink acknowledged the
	// row, as a polling dispatcher did; the slot is not confirmed past a
	// row before its column is set. Off by default.
	SentAt string `yaml:"sent_at"`
	// DeliverAt, when set, is a nullable timestamp column: the message is
	// not delivered before it (Service Bus ScheduledEnqueueTime, SQS
	// DelaySeconds, NATS scheduled messages, RabbitMQ's delayed-message
	// exchange). A sink that cannot hold a message back refuses the
	// mapping (docs/configuration.md, "Scheduled delivery and expiry").
	// Off by default.
	DeliverAt string `yaml:"deliver_at"`
	// ExpiresAt, when set, is a nullable timestamp column: the message is
	// worthless after it (the broker's time to live where it has one;
	// relay.on_expired when the relay reaches it after it). Off by default.
	ExpiresAt string `yaml:"expires_at"`
	// Order, when set, is a column whose values increase in the order the
	// rows are inserted, within a transaction too (an identity or bigserial
	// column; a clock_timestamp() default, to the microsecond): recover,
	// resync, replay and gap fills read rows in its order, then the id's.
	// Unset, the default layout's table uses its seq column when it has
	// one (sql/outbox.sql); "-" turns that off. Without one, rows come in
	// time then id order (docs/design.md, "Row order from the table").
	Order string `yaml:"order"`
}

// Layout returns the mapping as the relay reads it: an optional role
// written "-" (layout.Omit) has no column.
func (c Columns) Layout() layout.Columns {
	return layout.FromConfig(layout.Columns{c.ID, c.Type, c.Key, c.Payload, c.Headers, c.Time, c.SentAt, c.DeliverAt, c.ExpiresAt})
}

// Outbox returns the outbox table (postgres.table) and its layout.
func (c *Config) Outbox() layout.Table {
	t := layout.Table{Columns: c.Columns.Layout()}
	switch o := c.Columns.Order; {
	case o == "" && t.Columns.Unscheduled().DefaultTable():
		t.Order, t.OrderIfPresent = layout.DefaultOrder, true
	case o != layout.Omit:
		t.Order = o
	}
	if parts, err := sqlident.Split(c.Postgres.Table); err == nil && len(parts) == 2 {
		t.Schema, t.Name = parts[0], parts[1]
	}
	return t
}

// Relay tunes the pipeline between the stream and the sinks.
type Relay struct {
	// WindowMessages is the most messages in flight (read from the stream,
	// not yet acknowledged by every sink). Default 10000.
	WindowMessages int `yaml:"window_messages"`
	// WindowBytes is the most payload bytes in flight. Default 64 MiB.
	WindowBytes int64 `yaml:"window_bytes"`
	// BatchSize is the most messages a sink gets in one Publish call.
	// Default 1000.
	BatchSize int `yaml:"batch_size"`
	// ShutdownTimeout bounds the drain of in-flight messages on SIGINT or
	// SIGTERM. Default 30s.
	ShutdownTimeout Duration `yaml:"shutdown_timeout"`
	// Procs is how many OS threads may run Go code at once (GOMAXPROCS)
	// for `cdc run`. Default 1 with one sink: the pipeline is one stream,
	// and on a small machine shared with Postgres one thread relays faster
	// than several, which spend their time waking each other: fewer
	// context switches, more throughput. Default 2 with several sinks:
	// they publish in parallel, and on one thread a file sink's write and
	// fdatasync hold up the others, so three sinks catch up well below
	// one sink's rate. (BENCHMARKS.md, "What each optimisation bought",
	// the relay.procs rows; the fan-out row walpost → file + Kafka +
	// discard.) 0 means Go's default (every core). The GOMAXPROCS
	// environment variable wins over all of these.
	Procs *int `yaml:"procs"`
	// OnInvalid is what happens to an outbox row that cannot be mapped to
	// a message (id not a UUID, payload not JSON, …): "stop" (default)
	// stops the relay with an error naming the row, having delivered and
	// confirmed everything before it; "dead_letter" parks the row in
	// postgres.dead_letter_table, logs it at error level, counts it in
	// walpost_dead_lettered_total, and goes on; "hold_key" parks it the
	// same way and also every later message of its ordering key (the key
	// column, or the id when the key is NULL), which the other keys
	// overtake, until `cdc dead-letter resend` or `drop` of the row
	// releases the key in order (walpost_held_keys). A row whose key
	// cannot be read stops the relay under hold_key.
	OnInvalid Policy `yaml:"on_invalid"`
	// OnRefused is what happens to a message a sink refuses for good
	// because of the message itself (larger than the broker takes, a topic
	// or queue name from its type that the broker cannot use): "stop"
	// (default) stops the relay with an error naming the message, having
	// confirmed everything before it; "dead_letter" publishes the refused
	// batch one message at a time, tries the refused message alone
	// relay.refused_attempts times, then parks it in
	// postgres.dead_letter_table for that sink, logs it at error level,
	// counts it in walpost_refused_total and goes on. Refusals that are
	// not about one message (credentials, a missing topic, settings)
	// always stop the relay. "hold_key" parks it like dead_letter and,
	// for that sink only, every later message of its ordering key, until
	// `cdc dead-letter resend` or `drop` of it releases the key in order.
	OnRefused Policy `yaml:"on_refused"`
	// OnExpired is what happens to a message whose expires_at
	// (columns.expires_at, or the envelope's) has passed when the relay
	// reads it, before any sink gets it: "drop" (default) acknowledges it
	// unpublished, as the broker's time to live would, logs it at warn
	// level and counts it in walpost_expired_total{action="drop"};
	// "dead_letter" parks it in postgres.dead_letter_table for each sink
	// it was routed to (cdc dead-letter resend publishes it, without its
	// expiry); "send" publishes it anyway, without a time to live. A
	// message whose deliver_at is at or after its expires_at counts as
	// expired too (it could never be delivered in time).
	OnExpired ExpiredPolicy `yaml:"on_expired"`
	// RefusedAttempts is how often a message is tried alone before
	// on_refused: dead_letter parks it (default 3).
	RefusedAttempts int `yaml:"refused_attempts"`
	// RetryBackoff is the longest wait between two attempts of a batch that
	// a sink failed to publish (default 30s; attempts start at 100ms).
	RetryBackoff Duration `yaml:"retry_backoff"`
	// Retention, when set, deletes delivered outbox rows older than its
	// keep (retention.go; docs/design.md, "Retention"). Off by default.
	Retention *Retention `yaml:"retention"`
	// ClaimCheck, when set, stores payloads too large for a sink in Azure
	// Blob Storage or S3 and sends a reference instead (claimcheck.go;
	// docs/claim-check.md). A sink's own claim_check replaces it for that
	// sink. Off by default.
	ClaimCheck *ClaimCheck `yaml:"claim_check"`
}

// Route selects the messages a sink receives by type, with path.Match globs.
// An empty Include means every type.
type Route struct {
	Include []string `yaml:"include"`
	Exclude []string `yaml:"exclude"`
}

// Matches reports whether a message of type typ goes to the sink.
func (r Route) Matches(typ string) bool {
	for _, p := range r.Exclude {
		if ok, _ := path.Match(p, typ); ok {
			return false
		}
	}
	if len(r.Include) == 0 {
		return true
	}
	for _, p := range r.Include {
		if ok, _ := path.Match(p, typ); ok {
			return true
		}
	}
	return false
}

// HTTP is the listener for /metrics, /healthz and /readyz.
type HTTP struct {
	// Listen is host:port; empty disables the listener.
	Listen string `yaml:"listen"`
	// Pprof adds Go's profiling endpoints under /debug/pprof/ (default
	// false): e.g. go tool pprof http://HOST:PORT/debug/pprof/profile?seconds=20.
	// They show the process's internals to whoever reaches the port.
	Pprof bool `yaml:"pprof"`
	// Auth, when set, makes /metrics and /debug/pprof/ require
	// credentials; /healthz and /readyz never do (probes). Unset: no
	// authentication.
	Auth *HTTPAuth `yaml:"auth"`
	// Console serves the operator's console on the listener (default
	// false): a page at /console/ and its JSON API under /api/v1/
	// (internal/console, docs/operations.md "Console"). On a listen
	// address that is not loopback it needs OperateToken.
	Console bool `yaml:"console"`
	// ViewToken lets its bearer read the console (and its API) without
	// acting; OperateToken also lets them resend, drop and release parked
	// messages. Each is sent as "Authorization: Bearer <token>", or as
	// the password of basic authentication (any user name), at least 16
	// bytes, the two different. http.auth's credentials, when set, act as
	// the operate token. Secrets (Config.Secrets); only with Console.
	ViewToken    string `yaml:"view_token"`
	OperateToken string `yaml:"operate_token"`
}

// HTTPAuth is what /metrics and /debug/pprof/ require: HTTP basic
// authentication (Username and Password) or a bearer token (an
// "Authorization: Bearer <BearerToken>" header), one or the other.
// Password and BearerToken are secrets (Config.Secrets).
type HTTPAuth struct {
	Username    string `yaml:"username"`
	Password    string `yaml:"password"`
	BearerToken string `yaml:"bearer_token"`
}

// Log configures logging.
type Log struct {
	Level  string `yaml:"level"`  // debug, info, warn, error (default info)
	Format string `yaml:"format"` // json or console (default json)
}

// Duration is a time.Duration written as "10s", "250ms".
type Duration time.Duration

// UnmarshalYAML accepts Go duration strings.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration (use e.g. 500ms, 10s, 1m) (line %d)", s, n.Line)
	}
	*d = Duration(v)
	return nil
}

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// Load reads, expands, decodes, overrides from the environment, defaults and
// validates the file at path.
func Load(path string) (*Config, error) {
	return LoadFor(path)
}

// LoadFor is Load for a command that does not use the settings under
// unused (top-level keys or field paths: "sinks", "http",
// "relay.claim_check"): a ${VAR} there that is not set is no error; the
// value is left empty, its field listed by Unresolved, and the section it
// is in is not validated (cdc init run by a migrations job that talks to
// PostgreSQL only, without the sinks' secrets: docs/operations.md, "What
// each command needs").
func LoadFor(path string, unused ...string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	c, err := ParseFor(b, os.LookupEnv, unused...)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// Unresolved lists the fields left empty because a ${VAR} in them was not
// set and the command does not use them (LoadFor), in file order.
func (c *Config) Unresolved() []string { return c.unresolved }

// UnresolvedUnder reports whether a field at or below field was left
// unresolved (LoadFor).
func (c *Config) UnresolvedUnder(field string) bool {
	for _, u := range c.unresolved {
		if under(u, field) {
			return true
		}
	}
	return false
}

// Parse is Load on bytes, with lookup standing for the environment. Its
// errors are *Error values (see the package doc for the steps).
func Parse(b []byte, lookup func(string) (string, bool)) (*Config, error) {
	return ParseFor(b, lookup)
}

// ParseFor is LoadFor on bytes.
func ParseFor(b []byte, lookup func(string) (string, bool), unused ...string) (*Config, error) {
	var root yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(b)).Decode(&root); err != nil && !errors.Is(err, io.EOF) {
		e := syntaxError(err)
		if l := misindented(b, e.Line, e.Msg); l != e.Line {
			e.Line, e.Msg = l, e.Msg+": this line is indented less than the one before and more than its parent; align it with the keys of its mapping"
		}
		if bytes.Contains(b, []byte("${")) {
			e.Msg += ` (a ${VAR} inside [ ] or { } must be quoted: '${VAR}')`
		}
		return nil, e
	}
	if expandedSize(&root, maxVisits, map[*yaml.Node]bool{}) > maxVisits {
		// Checked for the whole file, so that the sinks' own decoding,
		// later and repeated, is bounded too.
		return nil, &Error{Msg: fmt.Sprintf("the file has more than %d values, counting each use of an alias (an alias bomb?)", maxVisits)}
	}
	refs := map[*yaml.Node]expansion{}
	x := &expandOptions{unused: unused}
	if err := expandTree(&root, "", lookup, refs, x); err != nil {
		return nil, err
	}
	c := &Config{src: map[string]source{}, unresolved: x.unresolved}
	d := &decoder{refs: refs, src: c.src, collect: true}
	if err := d.decode(&root, reflect.ValueOf(c).Elem(), ""); err != nil {
		return nil, err
	}
	if err := c.applyEnv(lookup); err != nil {
		return nil, err
	}
	c.SetDefaults()
	// Every mistake at once: the settings that did not decode, then the
	// first of each section's checks that does not blame one of them.
	var errs []error
	for _, e := range d.errs {
		errs = append(errs, e)
	}
	errs = append(errs, c.validate(d.errs)...)
	errs = append(errs, c.checkSinks(errs)...)
	if err := joinErrors(errs); err != nil {
		return nil, err
	}
	return c, nil
}

// misindented returns the line to blame for the YAML error msg that the
// parser reported at line: for "did not find expected key" (a key
// indented less than its mapping's, but more than the parent's: "
// sinks:" under "  url: …"), the parser names the line before the
// mistake; the mistake is the first line of content after it when that
// one is indented less. Otherwise line itself.
func misindented(b []byte, line int, msg string) int {
	if line <= 0 || !strings.Contains(msg, "did not find expected key") {
		return line
	}
	lines := strings.Split(string(b), "\n")
	content := func(s string) bool { t := strings.TrimSpace(s); return t != "" && !strings.HasPrefix(t, "#") }
	indent := func(s string) int { return len(s) - len(strings.TrimLeft(s, " ")) }
	base := -1
	for i := min(line, len(lines)) - 1; i >= 0; i-- {
		if content(lines[i]) {
			base = indent(lines[i])
			break
		}
	}
	for i := line; i < len(lines); i++ {
		if content(lines[i]) {
			if indent(lines[i]) < base {
				return i + 1
			}
			break
		}
	}
	return line
}

// sinkCheck validates one sink's kind-specific settings
// (RegisterSinkCheck); nil until the sink registry registers it.
var (
	sinkCheckMu sync.Mutex
	sinkCheck   func(index int, s *Sink) error
)

// RegisterSinkCheck makes Parse check each sink's kind-specific settings
// with f (publish.Check, which knows the kinds), so that one run reports a
// sink's mistakes with the rest of the file's. Without it (a program that
// imports no sink), the kinds are checked when the sinks are prepared.
func RegisterSinkCheck(f func(index int, s *Sink) error) {
	sinkCheckMu.Lock()
	defer sinkCheckMu.Unlock()
	sinkCheck = f
}

// checkSinks runs the registered sink check on every sink with no error
// among found about it and no ${VAR} left unresolved (LoadFor).
func (c *Config) checkSinks(found []error) []error {
	sinkCheckMu.Lock()
	check := sinkCheck
	sinkCheckMu.Unlock()
	if check == nil {
		return nil
	}
	var errs []error
	for i := range c.Sinks {
		at := fmt.Sprintf("sinks[%d]", i)
		if c.UnresolvedUnder(at) || c.Sinks[i].Kind == "" || slices.ContainsFunc(found, func(err error) bool {
			var e *Error
			return errors.As(err, &e) && (under(e.Field, at) || e.Field == "sinks")
		}) {
			continue
		}
		if err := check(i, &c.Sinks[i]); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntaxError rewords the YAML parser's "yaml: line 3: …" as "not valid
// YAML: … (line 3)".
func syntaxError(err error) *Error {
	msg := err.Error()
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &Error{Msg: "not valid YAML: " + m[2], Line: line}
	}
	return &Error{Msg: "not valid YAML: " + strings.TrimPrefix(msg, "yaml: ")}
}

// Env overrides: variable -> setter.
var envVars = []struct {
	name, field string
	set         func(c *Config, v string) error
}{
	{"CDC_POSTGRES_URL", "postgres.url", func(c *Config, v string) error { c.Postgres.URL = v; return nil }},
	{"CDC_POSTGRES_PRIMARY_URL", "postgres.primary_url", func(c *Config, v string) error { c.Postgres.PrimaryURL = v; return nil }},
	{"CDC_POSTGRES_TABLE", "postgres.table", func(c *Config, v string) error { c.Postgres.Table = v; return nil }},
	{"CDC_POSTGRES_PUBLICATION", "postgres.publication", func(c *Config, v string) error { c.Postgres.Publication = v; return nil }},
	{"CDC_POSTGRES_SLOT", "postgres.slot", func(c *Config, v string) error { c.Postgres.Slot = v; return nil }},
	{"CDC_HTTP_LISTEN", "http.listen", func(c *Config, v string) error { c.HTTP.Listen = v; return nil }},
	{"CDC_LOG_LEVEL", "log.level", func(c *Config, v string) error { c.Log.Level = v; return nil }},
	{"CDC_LOG_FORMAT", "log.format", func(c *Config, v string) error { c.Log.Format = v; return nil }},
	{"CDC_RELAY_WINDOW_MESSAGES", "relay.window_messages", func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("%q is not a whole number", v)
		}
		c.Relay.WindowMessages = n
		return nil
	}},
}

func (c *Config) applyEnv(lookup func(string) (string, bool)) error {
	for _, e := range envVars {
		if v, ok := lookup(e.name); ok && v != "" {
			if err := e.set(c, v); err != nil {
				return &Error{Field: e.field, Msg: err.Error(), Env: e.name}
			}
			if c.src != nil {
				c.src[e.field] = source{env: e.name}
			}
		}
	}
	return nil
}

// IsSet reports whether the setting at field (a path such as
// "log.format") was given, in the file or by a CDC_* variable, rather
// than defaulted.
func (c *Config) IsSet(field string) bool {
	_, ok := c.src[field]
	return ok
}

// SetDefaults fills every unset field with its default.
func (c *Config) SetDefaults() {
	p := &c.Postgres
	c.setSourceDefaults()
	def(&p.Table, "public.outbox")
	def(&p.Publication, "walpost_outbox")
	def(&p.Slot, "walpost_outbox")
	def(&p.StateSchema, "public")
	def(&p.ProgressTable, p.StateSchema+".walpost_sink_progress")
	def(&p.DeadLetterTable, p.StateSchema+".walpost_dead_letter")
	def(&p.AdoptTable, p.StateSchema+".walpost_adopt")
	def(&p.CoverageTable, p.StateSchema+".walpost_coverage")
	if p.GapMargin == 0 {
		p.GapMargin = Duration(time.Minute)
	}
	if p.StatusInterval == 0 {
		p.StatusInterval = Duration(10 * time.Second)
	}
	if p.HeartbeatInterval == nil {
		d := Duration(10 * time.Second)
		p.HeartbeatInterval = &d
	}
	if p.ReconnectBackoff == 0 {
		p.ReconnectBackoff = Duration(30 * time.Second)
	}
	if p.StandbyPoll == 0 {
		p.StandbyPoll = Duration(time.Second)
	}
	def(&p.ReceiveBuffer, ReceiveBufferAuto)
	if p.MaxMessageBytes == 0 {
		p.MaxMessageBytes = 64 << 20
	}
	if parts, err := sqlident.Split(p.Table); err == nil && len(parts) == 1 {
		p.Table = "public." + p.Table
	}
	col := &c.Columns
	for role, f := range []*string{&col.ID, &col.Type, &col.Key, &col.Payload, &col.Headers} {
		def(f, layout.Default[role])
	}
	r := &c.Relay
	if r.WindowMessages == 0 {
		r.WindowMessages = 10000
	}
	if r.WindowBytes == 0 {
		r.WindowBytes = 64 << 20
	}
	if r.BatchSize == 0 {
		r.BatchSize = 1000
	}
	if r.ShutdownTimeout == 0 {
		r.ShutdownTimeout = Duration(30 * time.Second)
	}
	if r.OnInvalid == "" {
		r.OnInvalid = Stop
	}
	if r.OnRefused == "" {
		r.OnRefused = Stop
	}
	if r.OnExpired == "" {
		r.OnExpired = ExpiredDrop
	}
	if !p.TableLess() {
		cols := c.Columns.Layout()
		for i := range c.Sinks {
			c.Sinks[i].DeliverAt, c.Sinks[i].ExpiresAt = cols.Has(layout.DeliverAt), cols.Has(layout.ExpiresAt)
		}
	}
	if r.RefusedAttempts == 0 {
		r.RefusedAttempts = 3
	}
	if r.Procs == nil {
		n := 1
		if len(c.Sinks) > 1 {
			n = 2
		}
		r.Procs = &n
	}
	if r.RetryBackoff == 0 {
		r.RetryBackoff = Duration(30 * time.Second)
	}
	c.setRetentionDefaults()
	c.setClaimCheckDefaults()
	def(&c.Log.Level, "info")
	def(&c.Log.Format, "json")
}

func def(s *string, v string) {
	if *s == "" {
		*s = v
	}
}
