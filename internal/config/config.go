// Package config loads and validates walpost's YAML configuration.
//
// Loading happens in three steps: ${VAR} references in the file are replaced
// by environment variables (${VAR:-default} gives a default; a reference to an
// unset variable without a default is an error, so a typo does not silently
// become an empty password); the YAML is decoded strictly (an unknown key is
// an error that names it and its line); then CDC_* environment variables
// override the main settings, defaults are filled in and Validate checks
// every field, naming the field in its error (`sinks[1].path: empty`).
//
// Sink settings beyond name, kind and route belong to the sink kind: each
// Sink keeps its YAML node, and the sink's constructor decodes it strictly
// into its own struct with Sink.Decode.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Config is the whole configuration file.
type Config struct {
	Postgres Postgres `yaml:"postgres"`
	Columns  Columns  `yaml:"columns"`
	Relay    Relay    `yaml:"relay"`
	Sinks    []Sink   `yaml:"sinks"`
	HTTP     HTTP     `yaml:"http"`
	Log      Log      `yaml:"log"`
}

// Postgres says where the outbox is and how it is replicated.
type Postgres struct {
	// URL is a libpq connection URL or key/value string. The replication
	// connection adds replication=database itself.
	URL string `yaml:"url"`
	// Table is the outbox table, schema-qualified (default public.outbox).
	Table string `yaml:"table"`
	// Publication is created FOR TABLE <table> WITH (publish = 'insert')
	// when missing (default walpost_outbox).
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
	// ProgressTable keeps each sink's last acknowledged position, so that
	// after a restart a sink that was ahead of the slot does not get
	// messages again (default public.walpost_sink_progress; "-" disables).
	ProgressTable string `yaml:"progress_table"`
	// DeadLetterTable receives rows that cannot be mapped to a message
	// when relay.on_invalid is dead_letter, and messages a sink refuses
	// for good when relay.on_refused is dead_letter (default
	// public.walpost_dead_letter; created when missing).
	DeadLetterTable string `yaml:"dead_letter_table"`
	// ReconnectBackoff is the longest wait between reconnect attempts
	// (default 30s; attempts start at 250ms and double).
	ReconnectBackoff Duration `yaml:"reconnect_backoff"`
}

// Columns maps the outbox's roles to the table's column names.
type Columns struct {
	ID      string `yaml:"id"`
	Type    string `yaml:"type"`
	Key     string `yaml:"key"`
	Payload string `yaml:"payload"`
	Headers string `yaml:"headers"`
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
	// for `cdc run`. Default 1: the pipeline is one stream, and on a small
	// machine shared with Postgres one thread relays faster than several,
	// which spend their time waking each other (measured on 2 cores: ~15×
	// fewer context switches, 1.5–3× the throughput). 0 means Go's default
	// (every core). The GOMAXPROCS environment variable wins over both.
	Procs *int `yaml:"procs"`
	// OnInvalid is what happens to an outbox row that cannot be mapped to
	// a message (id not a UUID, payload not JSON, …): "stop" (default)
	// stops the relay with an error naming the row, having delivered and
	// confirmed everything before it; "dead_letter" parks the row in
	// postgres.dead_letter_table, logs it at error level, counts it in
	// walpost_dead_lettered_total, and goes on.
	OnInvalid string `yaml:"on_invalid"`
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
	// always stop the relay.
	OnRefused string `yaml:"on_refused"`
	// RefusedAttempts is how often a message is tried alone before
	// on_refused: dead_letter parks it (default 3).
	RefusedAttempts int `yaml:"refused_attempts"`
	// RetryBackoff is the longest wait between two attempts of a batch that
	// a sink failed to publish (default 30s; attempts start at 100ms).
	RetryBackoff Duration `yaml:"retry_backoff"`
}

// Sink is one destination. Kind-specific settings are decoded by the sink
// with Decode.
type Sink struct {
	Name  string `yaml:"name"`
	Kind  string `yaml:"kind"`
	Route Route  `yaml:"route"`
	// Line is where the sink is defined in the file (0 when not from a file).
	Line int `yaml:"-"`
	node *yaml.Node
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
		return fmt.Errorf("line %d: %q is not a duration (use e.g. 500ms, 10s, 1m)", n.Line, s)
	}
	*d = Duration(v)
	return nil
}

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// UnmarshalYAML keeps the node so that the sink kind can decode its own
// settings.
func (s *Sink) UnmarshalYAML(n *yaml.Node) error {
	var common struct {
		Name  string `yaml:"name"`
		Kind  string `yaml:"kind"`
		Route Route  `yaml:"route"`
	}
	// Decode loosely here: the kind's own decode is strict over all keys.
	if err := n.Decode(&common); err != nil {
		return err
	}
	s.Name, s.Kind, s.Route, s.Line = common.Name, common.Kind, common.Route, n.Line
	s.node = n
	return nil
}

// Decode decodes the sink's kind-specific settings into v strictly: a key
// that is neither name, kind, route nor a field of v is an error naming it.
func (s *Sink) Decode(v any) error {
	if s.node == nil {
		return nil
	}
	rest := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: s.node.Line}
	for i := 0; i+1 < len(s.node.Content); i += 2 {
		switch s.node.Content[i].Value {
		case "name", "kind", "route":
			continue
		}
		rest.Content = append(rest.Content, s.node.Content[i], s.node.Content[i+1])
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	if err := enc.Encode(rest); err != nil {
		return err
	}
	dec := yaml.NewDecoder(&buf)
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		return cleanYAMLError(err)
	}
	return nil
}

// Load reads, expands, decodes, overrides from the environment, defaults and
// validates the file at path.
func Load(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	c, err := Parse(b, os.LookupEnv)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// Parse is Load on bytes, with lookup standing for the environment.
func Parse(b []byte, lookup func(string) (string, bool)) (*Config, error) {
	expanded, err := Expand(string(b), lookup)
	if err != nil {
		return nil, err
	}
	var c Config
	dec := yaml.NewDecoder(strings.NewReader(expanded))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return nil, cleanYAMLError(err)
	}
	if err := c.applyEnv(lookup); err != nil {
		return nil, err
	}
	c.SetDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

var refRE = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}`)

// Expand replaces ${VAR} and ${VAR:-default} in s. A reference to an unset
// variable without a default is an error; "$$" is not special and a lone "$"
// is kept as is (passwords may contain one).
func Expand(s string, lookup func(string) (string, bool)) (string, error) {
	var missing []string
	out := refRE.ReplaceAllStringFunc(s, func(ref string) string {
		m := refRE.FindStringSubmatch(ref)
		if v, ok := lookup(m[1]); ok {
			return v
		}
		if m[2] != "" {
			return m[3]
		}
		missing = append(missing, m[1])
		return ref
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("environment variable %s is not set (referenced as ${%s}; use ${%s:-default} for a default)",
			missing[0], missing[0], missing[0])
	}
	return out, nil
}

// Env overrides: variable -> setter.
var envVars = []struct {
	name string
	set  func(c *Config, v string) error
}{
	{"CDC_POSTGRES_URL", func(c *Config, v string) error { c.Postgres.URL = v; return nil }},
	{"CDC_POSTGRES_TABLE", func(c *Config, v string) error { c.Postgres.Table = v; return nil }},
	{"CDC_POSTGRES_PUBLICATION", func(c *Config, v string) error { c.Postgres.Publication = v; return nil }},
	{"CDC_POSTGRES_SLOT", func(c *Config, v string) error { c.Postgres.Slot = v; return nil }},
	{"CDC_HTTP_LISTEN", func(c *Config, v string) error { c.HTTP.Listen = v; return nil }},
	{"CDC_LOG_LEVEL", func(c *Config, v string) error { c.Log.Level = v; return nil }},
	{"CDC_LOG_FORMAT", func(c *Config, v string) error { c.Log.Format = v; return nil }},
	{"CDC_RELAY_WINDOW_MESSAGES", func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		c.Relay.WindowMessages = n
		return err
	}},
}

// EnvVars lists the CDC_* variables that override settings.
func EnvVars() []string {
	names := make([]string, len(envVars))
	for i, e := range envVars {
		names[i] = e.name
	}
	return names
}

func (c *Config) applyEnv(lookup func(string) (string, bool)) error {
	for _, e := range envVars {
		if v, ok := lookup(e.name); ok && v != "" {
			if err := e.set(c, v); err != nil {
				return fmt.Errorf("%s=%q: %v", e.name, v, err)
			}
		}
	}
	return nil
}

// SetDefaults fills every unset field with its default.
func (c *Config) SetDefaults() {
	p := &c.Postgres
	def(&p.Table, "public.outbox")
	def(&p.Publication, "walpost_outbox")
	def(&p.Slot, "walpost_outbox")
	def(&p.ProgressTable, "public.walpost_sink_progress")
	def(&p.DeadLetterTable, "public.walpost_dead_letter")
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
	if !strings.Contains(p.Table, ".") && p.Table != "" {
		p.Table = "public." + p.Table
	}
	col := &c.Columns
	def(&col.ID, "id")
	def(&col.Type, "type")
	def(&col.Key, "key")
	def(&col.Payload, "payload")
	def(&col.Headers, "headers")
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
	def(&r.OnInvalid, "stop")
	def(&r.OnRefused, "stop")
	if r.RefusedAttempts == 0 {
		r.RefusedAttempts = 3
	}
	if r.Procs == nil {
		one := 1
		r.Procs = &one
	}
	if r.RetryBackoff == 0 {
		r.RetryBackoff = Duration(30 * time.Second)
	}
	def(&c.Log.Level, "info")
	def(&c.Log.Format, "json")
}

func def(s *string, v string) {
	if *s == "" {
		*s = v
	}
}

var identRE = regexp.MustCompile(`^[a-z_][a-z0-9_$]{0,62}$`)

// Validate checks every field and names the first bad one.
func (c *Config) Validate() error {
	p := c.Postgres
	if p.URL == "" {
		return errors.New("postgres.url: empty (set it, or CDC_POSTGRES_URL)")
	}
	if strings.Contains(p.URL, "://") {
		if _, err := url.Parse(p.URL); err != nil {
			return fmt.Errorf("postgres.url: %v", err)
		}
	}
	parts := strings.Split(p.Table, ".")
	if len(parts) != 2 || !identRE.MatchString(parts[0]) || !identRE.MatchString(parts[1]) {
		return fmt.Errorf("postgres.table: %q is not schema.table with lower-case SQL identifiers", p.Table)
	}
	if pt := strings.Split(p.ProgressTable, "."); p.ProgressTable != "-" && (len(pt) != 2 || !identRE.MatchString(pt[0]) || !identRE.MatchString(pt[1])) {
		return fmt.Errorf("postgres.progress_table: %q is not schema.table with lower-case SQL identifiers (or \"-\" to disable)", p.ProgressTable)
	}
	for field, v := range map[string]string{"postgres.publication": p.Publication, "postgres.slot": p.Slot} {
		if !identRE.MatchString(v) {
			return fmt.Errorf("%s: %q must be a lower-case SQL identifier (letters, digits, _; at most 63)", field, v)
		}
	}
	if p.StatusInterval.D() < 100*time.Millisecond {
		return fmt.Errorf("postgres.status_interval: %v is under 100ms", p.StatusInterval.D())
	}
	if p.HeartbeatInterval.D() < 0 {
		return fmt.Errorf("postgres.heartbeat_interval: negative")
	}
	cols := map[string]string{}
	for field, v := range map[string]string{"columns.id": c.Columns.ID, "columns.type": c.Columns.Type,
		"columns.key": c.Columns.Key, "columns.payload": c.Columns.Payload, "columns.headers": c.Columns.Headers} {
		if v == "-" && (field == "columns.key" || field == "columns.headers") {
			continue // "-" means the table has no such column
		}
		if !identRE.MatchString(v) {
			return fmt.Errorf("%s: %q is not a lower-case column name (use \"-\" for key or headers when the table has none)", field, v)
		}
		if other, dup := cols[v]; dup {
			return fmt.Errorf("%s: column %q is already mapped by %s", field, v, other)
		}
		cols[v] = field
	}
	r := c.Relay
	if r.WindowMessages < 1 || r.WindowMessages > 10_000_000 {
		return fmt.Errorf("relay.window_messages: %d is outside 1..10000000", r.WindowMessages)
	}
	if r.WindowBytes < 1<<16 {
		return fmt.Errorf("relay.window_bytes: %d is under 65536", r.WindowBytes)
	}
	if *r.Procs < 0 || *r.Procs > 1024 {
		return fmt.Errorf("relay.procs: %d is outside 0..1024 (0: every core)", *r.Procs)
	}
	if r.OnInvalid != "stop" && r.OnInvalid != "dead_letter" {
		return fmt.Errorf("relay.on_invalid: %q is not stop or dead_letter", r.OnInvalid)
	}
	if r.OnRefused != "stop" && r.OnRefused != "dead_letter" {
		return fmt.Errorf("relay.on_refused: %q is not stop or dead_letter", r.OnRefused)
	}
	if r.RefusedAttempts < 1 || r.RefusedAttempts > 100 {
		return fmt.Errorf("relay.refused_attempts: %d is outside 1..100", r.RefusedAttempts)
	}
	if dt := strings.Split(p.DeadLetterTable, "."); len(dt) != 2 || !identRE.MatchString(dt[0]) || !identRE.MatchString(dt[1]) {
		return fmt.Errorf("postgres.dead_letter_table: %q is not schema.table with lower-case SQL identifiers", p.DeadLetterTable)
	}
	if r.BatchSize < 1 || r.BatchSize > 100_000 {
		return fmt.Errorf("relay.batch_size: %d is outside 1..100000", r.BatchSize)
	}
	if len(c.Sinks) == 0 {
		return errors.New("sinks: none configured (add at least one, e.g. {name: out, kind: stdout})")
	}
	names := map[string]int{}
	for i, s := range c.Sinks {
		if s.Name == "" {
			return fmt.Errorf("sinks[%d].name: empty", i)
		}
		if j, dup := names[s.Name]; dup {
			return fmt.Errorf("sinks[%d].name: %q is also the name of sinks[%d]", i, s.Name, j)
		}
		names[s.Name] = i
		if s.Kind == "" {
			return fmt.Errorf("sinks[%d].kind: empty (one of %s)", i, strings.Join(Kinds(), ", "))
		}
		for _, p := range append(append([]string{}, s.Route.Include...), s.Route.Exclude...) {
			if _, err := path.Match(p, ""); err != nil {
				return fmt.Errorf("sinks[%d].route: bad pattern %q: %v", i, p, err)
			}
		}
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("log.level: %q is not one of debug, info, warn, error", c.Log.Level)
	}
	switch c.Log.Format {
	case "json", "console":
	default:
		return fmt.Errorf("log.format: %q is not json or console", c.Log.Format)
	}
	return nil
}

// kinds is filled by RegisterKind so that errors can list the known kinds.
var kinds []string

// RegisterKind records a sink kind name for error messages.
func RegisterKind(name string) { kinds = append(kinds, name) }

// Kinds returns the registered sink kinds.
func Kinds() []string { return append([]string(nil), kinds...) }

var yamlFieldRE = regexp.MustCompile(`field (\S+) not found in type \S+`)

// cleanYAMLError turns "field foo not found in type config.Postgres" into
// "unknown key foo".
func cleanYAMLError(err error) error {
	msg := yamlFieldRE.ReplaceAllString(err.Error(), "unknown key \"$1\" (check its spelling and indentation)")
	msg = strings.TrimPrefix(msg, "yaml: ")
	return errors.New(msg)
}
