package config

import (
	"strings"
	"testing"
)

// TestReceiveBufferIsDeprecatedButAccepted: postgres.receive_buffer set to
// any value it took is still accepted and draws one deprecation naming
// the key; left out, no deprecation.
func TestReceiveBufferIsDeprecatedButAccepted(t *testing.T) {
	c, err := Parse([]byte(minimal), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if d := c.Deprecations(); len(d) != 0 {
		t.Fatalf("deprecations of a config without receive_buffer: %q", d)
	}
	for v, want := range map[string]string{"auto": "remove the key", "kernel": "remove the key", "131072": "size 131072 is still set"} {
		y := strings.Replace(minimal, "postgres:\n", "postgres:\n  receive_buffer: "+v+"\n", 1)
		c, err := Parse([]byte(y), env(nil))
		if err != nil {
			t.Fatalf("receive_buffer %s: %v", v, err)
		}
		d := c.Deprecations()
		if len(d) != 1 || !strings.HasPrefix(d[0], "postgres.receive_buffer is deprecated") || !strings.Contains(d[0], want) {
			t.Errorf("receive_buffer %s: deprecations %q, want one naming the key and saying %q", v, d, want)
		}
	}
}

// TestStateSchemaNamesTheStateTablesAndTheOldKeysAreDeprecated:
// postgres.state_schema puts the five state tables in one schema; a key
// that names one table is still honoured and draws a deprecation naming
// it, "-" none.
func TestStateSchemaNamesTheStateTablesAndTheOldKeysAreDeprecated(t *testing.T) {
	y := strings.Replace(minimal, "postgres:\n", "postgres:\n  state_schema: ops\n  coverage_table: \"-\"\n", 1) + "relay: {retention: {keep: 1h}}\n"
	c, err := Parse([]byte(y), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	p := c.Postgres
	if p.ProgressTable != "ops.walpost_sink_progress" || p.DeadLetterTable != "ops.walpost_dead_letter" || p.AdoptTable != "ops.walpost_adopt" ||
		p.CoverageTable != "-" || c.Relay.Retention.MarksTable != "ops.walpost_retention_marks" {
		t.Errorf("state tables %+v, marks %s: want each in schema ops", p, c.Relay.Retention.MarksTable)
	}
	if d := c.Deprecations(); len(d) != 0 {
		t.Errorf("deprecations %q, want none", d)
	}
	y = strings.Replace(minimal, "postgres:\n", "postgres:\n  dead_letter_table: app.dlq\n", 1)
	if c, err = Parse([]byte(y), env(nil)); err != nil {
		t.Fatal(err)
	}
	if d := c.Deprecations(); c.Postgres.DeadLetterTable != "app.dlq" || len(d) != 1 || !strings.HasPrefix(d[0], "postgres.dead_letter_table is deprecated") ||
		!strings.Contains(d[0], "postgres.state_schema") {
		t.Errorf("dead_letter_table app.dlq: %s, deprecations %q; want it honoured, and one deprecation saying to set state_schema", c.Postgres.DeadLetterTable, d)
	}
	if _, err := Parse([]byte(strings.Replace(minimal, "postgres:\n", "postgres:\n  state_schema: \"a.b\"\n", 1)), env(nil)); err == nil || !strings.Contains(err.Error(), "postgres.state_schema") {
		t.Errorf("state_schema a.b: %v, want an error naming postgres.state_schema", err)
	}
}
