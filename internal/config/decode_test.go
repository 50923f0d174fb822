package config

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// TestErrorsAreFieldWhatIsWrongAndLine: decoding errors name the setting
// by its YAML path, say what is wrong in words (no Go types, no "yaml:"
// prefix), and end with the line.
func TestErrorsAreFieldWhatIsWrongAndLine(t *testing.T) {
	const head = "postgres:\n  url: postgres://x\n"
	const sink = "sinks: [{name: a, kind: stdout}]\n"
	for _, c := range []struct{ yaml, want string }{
		{head + "  tabel: t\n" + sink,
			`postgres.tabel: unknown key "tabel" (check its spelling and indentation; known keys: url, primary_url, table, source, message_prefix, message_keys, message_roles, publication, slot, status_interval, heartbeat_interval, state_schema, progress_table, dead_letter_table, adopt_table, coverage_table, trusted_owners, gap_margin, reconnect_backoff, standby_poll, failover_slot, receive_buffer, max_message_bytes) (line 3)`},
		{head + "  status_interval: 10 seconds\n" + sink,
			`postgres.status_interval: "10 seconds" is not a duration (use e.g. 500ms, 10s, 1m) (line 3)`},
		{head + "relay:\n  window_messages: lots\n" + sink, `relay.window_messages: "lots" is not a whole number (line 4)`},
		{head + "relay:\n  window_messages: 1.5\n" + sink, `relay.window_messages: "1.5" is not a whole number (line 4)`},
		{head + "relay:\n  window_messages: 99999999999999999999\n" + sink, `relay.window_messages: "99999999999999999999" is not a whole number (line 4)`},
		{head + "relay:\n  window_bytes: 1e6\n" + sink, ``}, // a float without a fraction is whole
		{head + "relay:\n  procs: [1]\n" + sink, `relay.procs: want a single value, got a list (line 4)`},
		{head + "http:\n  pprof: yes please\n" + sink, `http.pprof: "yes please" is not true or false (line 4)`},
		{head + "http: [listen]\n" + sink, `http: want a mapping (key: value), got a list (line 3)`},
		{head + "log: json\n" + sink, `log: want a mapping (key: value), got "json" (line 3)`},
		{head + "  url: y\n" + sink, `postgres.url: set twice (first at line 2) (line 3)`},
		{head + "sinks: {name: a}\n", `sinks: want a list, got a mapping (line 3)`},
		{head + "sinks: [out]\n", `sinks[0]: want a mapping (name: …, kind: …, and the kind's settings), got "out" (line 3)`},
		{head + "sinks:\n  - name: a\n    kind: stdout\n    route: {include: order.*}\n", `sinks[0].route.include: want a list, got "order.*" (line 6)`},
		{head + "sinks: [{name: [a], kind: stdout}]\n", `sinks[0].name: want a single value, got a list (line 3)`},
		{"[1, 2]\n", `the file is not a mapping of settings (postgres: …, sinks: …) (line 1)`},
		{"postgres: {url: x\n", `not valid YAML: did not find expected ',' or '}' (line 1)`},
		{"postgres: &p {<<: *p, url: 'postgres://x'}\n" + sink, `postgres: alias *p refers to a value that contains it (line 1)`},
	} {
		_, err := Parse([]byte(c.yaml), env(nil))
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%q: unexpected error %v", c.yaml, err)
		case c.want != "" && (err == nil || err.Error() != c.want):
			t.Errorf("%q:\n got %v\nwant %s", c.yaml, err, c.want)
		}
	}
}

// TestMergeKeysAndAliases: YAML's << merges and aliases work as in the
// YAML library, keys of the mapping winning over merged ones.
func TestMergeKeysAndAliases(t *testing.T) {
	y := `
defaults: &d {kind: file, fsync: false}
postgres: {url: 'postgres://x'}
sinks:
  - <<: *d
    name: a
    path: /tmp/a
  - {<<: *d, name: b, path: /tmp/b, kind: stdout}
`
	_, err := Parse([]byte(y), env(nil))
	if err == nil || !strings.Contains(err.Error(), `defaults: unknown key "defaults"`) {
		t.Fatalf("a top-level key that is not a setting: %v", err)
	}
	c, err := Parse([]byte(strings.Replace(y, "defaults: &d {kind: file, fsync: false}\npostgres: {url: 'postgres://x'}", "postgres: {url: 'postgres://x', x: &d {kind: file, fsync: false}}", 1)), env(nil))
	if err == nil || !strings.Contains(err.Error(), "postgres.x: unknown key") {
		t.Fatalf("err = %v", err)
	}
	// Anchors inside sinks are fine: only the kind decodes its keys.
	y = "postgres: {url: 'postgres://x'}\nsinks:\n  - &d {name: a, kind: file, path: /tmp/a, fsync: false}\n  - {<<: *d, name: b, path: /tmp/b}\n"
	if c, err = Parse([]byte(y), env(nil)); err != nil {
		t.Fatal(err)
	}
	var fc struct {
		Path  string `yaml:"path"`
		Fsync *bool  `yaml:"fsync"`
	}
	if err := c.Sinks[1].Decode(&fc); err != nil || c.Sinks[1].Kind != "file" || fc.Path != "/tmp/b" || fc.Fsync == nil || *fc.Fsync {
		t.Fatalf("merged sink: %+v %+v %v", c.Sinks[1], fc, err)
	}
}

// TestAliasBombIsRefused: a few lines that expand to billions of values
// through nested merges end in an error, quickly.
func TestAliasBombIsRefused(t *testing.T) {
	var b strings.Builder
	b.WriteString("postgres: {url: 'postgres://x'}\nsinks:\n  - &a0 {name: a, kind: stdout}\n")
	for i := 1; i <= 12; i++ {
		fmt.Fprintf(&b, "  - &a%d {<<: [*a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d]}\n", i, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1)
	}
	_, err := Parse([]byte(b.String()), env(nil))
	if err == nil || !strings.Contains(err.Error(), "an alias bomb?") {
		t.Fatalf("err = %v", err)
	}
	// The same under a key only the sink kind decodes.
	b.Reset()
	b.WriteString("postgres: {url: 'postgres://x'}\nx0: &a0 [a, b, c, d, e, f, g, h, i, j]\nsinks:\n")
	for i := 1; i <= 9; i++ {
		fmt.Fprintf(&b, "  - {name: s%d, kind: stdout, extra: &a%d [*a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d]}\n", i, i, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1)
	}
	_, err = Parse([]byte(b.String()), env(nil))
	if err == nil || err.Error() != "the file has more than 100000 values, counting each use of an alias (an alias bomb?)" {
		t.Fatalf("err = %v", err)
	}
}

// TestSinkDecodeNamesTheSinkFieldAndLine: Sink.Decode reads the node
// itself (no round trip through YAML text), so its line numbers are the
// file's, and its errors name sinks[i].
func TestSinkDecodeNamesTheSinkFieldAndLine(t *testing.T) {
	y := `postgres:
  url: postgres://x
sinks:
  - name: out
    kind: stdout
  - name: f
    kind: file
    path: /tmp/x
    batch_sise: 5
    fsync: maybe
`
	c, err := Parse([]byte(y), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	var fc struct {
		Path  string `yaml:"path"`
		Fsync *bool  `yaml:"fsync"`
	}
	want := `sinks[1].batch_sise: unknown key "batch_sise" (check its spelling and indentation; known keys: name, kind, route, claim_check, path, fsync) (line 9)`
	if err := c.Sinks[1].Decode(&fc); err == nil || err.Error() != want {
		t.Fatalf("err = %v\nwant  %s", err, want)
	}
	var none struct{}
	if err := c.Sinks[0].Decode(&none); err != nil {
		t.Fatal(err)
	}
	c, _ = Parse([]byte(strings.Replace(y, "    batch_sise: 5\n", "", 1)), env(nil))
	err = c.Sinks[1].Decode(&fc)
	if want := `sinks[1].fsync: "maybe" is not true or false (line 9)`; err == nil || err.Error() != want {
		t.Fatalf("err = %v\nwant  %s", err, want)
	}
	// WrapError keeps a field error as it is, and prefixes any other.
	if got := c.Sinks[1].WrapError(1, err); got != err {
		t.Errorf("WrapError changed %v into %v", err, got)
	}
	if got := c.Sinks[1].WrapError(1, fmt.Errorf("path: empty")).Error(); got != "sinks[1] (f): path: empty (line 6)" {
		t.Errorf("WrapError = %q", got)
	}
}

// TestSinkFromYAMLUnmarshal: a Sink made by yaml.Unmarshal (as sink tests
// do) decodes the same way, with paths relative to the sink, which
// WrapError completes.
func TestSinkFromYAMLUnmarshal(t *testing.T) {
	var s Sink
	if err := s.UnmarshalYAML(mustNode(t, "name: f\nkind: file\npaht: /tmp/x\n")); err != nil {
		t.Fatal(err)
	}
	var fc struct {
		Path string `yaml:"path"`
	}
	err := s.Decode(&fc)
	if want := `paht: unknown key "paht" (check its spelling and indentation; known keys: name, kind, route, claim_check, path) (line 3)`; err == nil || err.Error() != want {
		t.Fatalf("err = %v", err)
	}
	if got := s.WrapError(2, err).Error(); !strings.HasPrefix(got, "sinks[2].paht: unknown key") {
		t.Fatalf("WrapError = %q", got)
	}
}

// TestValidationReportsEveryErrorInAFixedOrder: with several errors,
// each section's first is reported, in one error, in the file's order
// (those without a line last), the same every time (the order used to
// depend on map iteration); fixing them one by one leaves the others.
func TestValidationReportsEveryErrorInAFixedOrder(t *testing.T) {
	y := `postgres:
  url: postgres://x
  slot: Bad-Slot
  publication: Pxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx
columns: {id: id, type: id, key: "k\0"}
log: {level: loud}
`
	publication := `postgres.publication: "Pxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"… is not a usable name: it is 65 bytes long (PostgreSQL truncates names to 63 bytes) (line 4)`
	slot := `postgres.slot: "Bad-Slot" is not a replication slot name: PostgreSQL allows only lower-case letters, digits and _ (at most 63) (line 3)`
	key := `columns.key: "k\x00" is not a usable column name: it is holding a zero byte (use "-" when the table has no such column) (line 5)`
	sinks := `sinks: none configured (add at least one, e.g. {name: out, kind: stdout})`
	level := `log.level: "loud" is not one of debug, info, warn, error (line 6)`
	distinct := `columns.type: column "id" is already mapped by columns.id (line 5)`
	all := func(es ...string) string {
		if len(es) == 1 {
			return es[0]
		}
		return fmt.Sprintf("%d errors:\n  %s", len(es), strings.Join(es, "\n  "))
	}
	wants := []string{
		all(publication, key, distinct, level, sinks),
		all(slot, key, distinct, level, sinks),
		all(key, distinct, level, sinks),
		all(distinct, level, sinks),
		all(distinct, level),
		all(distinct),
	}
	fixes := []func(string) string{
		func(s string) string {
			return strings.Replace(s, "Pxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", "Pub", 1)
		},
		func(s string) string { return strings.Replace(s, "Bad-Slot", "slot", 1) },
		func(s string) string { return strings.Replace(s, `key: "k\0"`, "key: k", 1) },
		func(s string) string { return s + "sinks: [{name: a, kind: stdout}]\n" },
		func(s string) string { return strings.Replace(s, "loud", "info", 1) },
	}
	for i, want := range wants {
		for range 5 {
			_, err := Parse([]byte(y), env(nil))
			if err == nil || err.Error() != want {
				t.Fatalf("step %d: err = %v\nwant  %s", i, err, want)
			}
		}
		if i < len(fixes) {
			y = fixes[i](y)
		}
	}
}

func mustNode(t *testing.T, y string) *yaml.Node {
	t.Helper()
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(y), &n); err != nil {
		t.Fatal(err)
	}
	return n.Content[0]
}

type upper string

func (u *upper) UnmarshalYAML(n *yaml.Node) error {
	if n.Value == "" {
		return fmt.Errorf("yaml: empty")
	}
	*u = upper(strings.ToUpper(n.Value))
	return nil
}

type common struct {
	Region string `yaml:"region"`
}

// TestSinkDecodeSupportsTheTypesSinksUse: pointers, slices, maps, nested
// structs, inline structs, interfaces, durations and yaml.Unmarshaler.
func TestSinkDecodeSupportsTheTypesSinksUse(t *testing.T) {
	y := `postgres: {url: 'postgres://x'}
sinks:
  - name: s
    kind: custom
    region: eu
    retries: 3
    delay: 250ms
    every: ${EVERY}
    tags: [a, b]
    labels: {team: core, tier: "1"}
    tls: {enabled: true}
    extra: {any: [1, two]}
    level: debug
    nothing: ~
`
	c, err := Parse([]byte(y), env(map[string]string{"EVERY": "1m"}))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		common  `yaml:",inline"`
		Retries *int              `yaml:"retries"`
		Delay   Duration          `yaml:"delay"`
		Every   *Duration         `yaml:"every"`
		Tags    []string          `yaml:"tags"`
		Labels  map[string]string `yaml:"labels"`
		TLS     struct {
			Enabled bool `yaml:"enabled"`
		} `yaml:"tls"`
		Extra   any    `yaml:"extra"`
		Level   upper  `yaml:"level"`
		Nothing *int64 `yaml:"nothing"`
	}
	if err := c.Sinks[0].Decode(&v); err != nil {
		t.Fatal(err)
	}
	if v.Region != "eu" || *v.Retries != 3 || v.Delay.D() != 250*time.Millisecond || v.Every.D() != time.Minute ||
		len(v.Tags) != 2 || v.Labels["tier"] != "1" || !v.TLS.Enabled || v.Level != "DEBUG" || v.Nothing != nil {
		t.Fatalf("decoded %+v", v)
	}
	if m, ok := v.Extra.(map[string]any); !ok || fmt.Sprint(m["any"]) != "[1 two]" {
		t.Fatalf("extra = %#v", v.Extra)
	}
	c, _ = Parse([]byte(strings.Replace(y, "level: debug", "level: ''", 1)), env(map[string]string{"EVERY": "1m"}))
	if err := c.Sinks[0].Decode(&v); err == nil || err.Error() != "sinks[0].level: empty (line 13)" {
		t.Fatalf("err = %v", err)
	}
}

type picky string

func (p *picky) UnmarshalYAML(n *yaml.Node) error { return fmt.Errorf("%q is not allowed", n.Value) }

// TestUnmarshalerErrorsDoNotRepeatExpandedValues: a yaml.Unmarshaler's
// error may quote the value; a value from ${VAR} is cut out of it.
func TestUnmarshalerErrorsDoNotRepeatExpandedValues(t *testing.T) {
	c, err := Parse([]byte("postgres: {url: 'postgres://x'}\nsinks:\n  - {name: a, kind: k, mode: \"${PW}\", other: lit}\n"), env(map[string]string{"PW": "hunter22"}))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Mode  picky  `yaml:"mode"`
		Other string `yaml:"other"`
	}
	if err := c.Sinks[0].Decode(&v); err == nil || strings.Contains(err.Error(), "hunter22") || !strings.HasPrefix(err.Error(), "sinks[0].mode: ") {
		t.Fatalf("err = %v", err)
	}
	var w struct {
		Mode  string `yaml:"mode"`
		Other picky  `yaml:"other"`
	}
	if err := c.Sinks[0].Decode(&w); err == nil || err.Error() != `sinks[0].other: "lit" is not allowed (line 3)` {
		t.Fatalf("err = %v", err)
	}
}
