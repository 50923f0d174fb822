package config

import "fmt"

// Deprecations lists, one sentence each, the deprecated keys the config
// sets (in the file or by a CDC_* variable), saying what to do instead.
// They are still accepted and honoured; cdc run logs each as a warning at
// start.
func (c *Config) Deprecations() []string {
	var out []string
	if c.IsSet("postgres.receive_buffer") {
		switch rb := c.Postgres.ReceiveBuffer; rb {
		case ReceiveBufferAuto, ReceiveBufferKernel:
			out = append(out, fmt.Sprintf("postgres.receive_buffer is deprecated: %s is what the relay does without it (the kernel sizes the replication socket's receive buffer); remove the key", rb))
		default:
			out = append(out, fmt.Sprintf("postgres.receive_buffer is deprecated: the size %s is still set on the replication socket, but the key will go; remove it to let the kernel size the buffer (two full bench runs showed no gain from a fixed size)", rb))
		}
	}
	for _, k := range []struct{ key, value, table string }{
		{"postgres.progress_table", c.Postgres.ProgressTable, "walpost_sink_progress"},
		{"postgres.dead_letter_table", c.Postgres.DeadLetterTable, "walpost_dead_letter"},
		{"postgres.adopt_table", c.Postgres.AdoptTable, "walpost_adopt"},
		{"postgres.coverage_table", c.Postgres.CoverageTable, "walpost_coverage"},
		{"relay.retention.marks_table", c.retentionMarks(), "walpost_retention_marks"},
	} {
		if c.IsSet(k.key) && k.value != "-" {
			out = append(out, fmt.Sprintf("%s is deprecated: the table %s is still used, but the key will go; set postgres.state_schema instead "+
				"(the state tables are then STATE_SCHEMA.%s and its siblings; rename the table, or keep the key this release)", k.key, k.value, k.table))
		}
	}
	return out
}

// retentionMarks is relay.retention.marks_table, "" when retention is off.
func (c *Config) retentionMarks() string {
	if c.Relay.Retention == nil {
		return ""
	}
	return c.Relay.Retention.MarksTable
}
