package config

import (
	"strings"
	"testing"
	"time"
)

func TestRetentionIsOffByDefaultAndDefaultsWhenOn(t *testing.T) {
	c, err := Parse([]byte(minimal), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.Relay.Retention != nil {
		t.Fatalf("retention is on without relay.retention: %+v", c.Relay.Retention)
	}
	c, err = Parse([]byte(minimal+"relay:\n  retention: {keep: 168h}\n"), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	r := c.Relay.Retention
	if r.Keep.D() != 168*time.Hour || r.Column != "created_at" || r.Margin.D() != time.Hour || r.Interval.D() != time.Minute ||
		r.Batch != 1000 || r.Pause.D() != 100*time.Millisecond || r.MarksTable != "public.walpost_retention_marks" {
		t.Fatalf("defaults: %+v margin %v pause %v", r, r.Margin.D(), r.Pause.D())
	}
	c, err = Parse([]byte(minimal+"columns: {time: OccurredOn}\nrelay:\n  retention: {keep: 1h, margin: 0s, pause: 0s}\n"), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if r := c.Relay.Retention; r.Column != "OccurredOn" || r.Margin.D() != 0 || r.Pause.D() != 0 {
		t.Fatalf("column should default to columns.time, margin and pause 0 should stay 0: %+v", r)
	}
}

func TestRetentionErrorsNameTheFieldAndLine(t *testing.T) {
	for y, want := range map[string]string{
		"relay:\n  retention: {}\n":                                                  "relay.retention.keep: 0s: set how long delivered rows stay",
		"relay:\n  retention: {keep: -1h}\n":                                         "relay.retention.keep: -1h0m0s: set how long",
		"relay:\n  retention:\n    keep: 1h\n    margin: -1s\n":                      "relay.retention.margin: -1s is negative (line 9)",
		"relay:\n  retention: {keep: 1h, interval: 10ms}\n":                          "relay.retention.interval: 10ms is under 100ms (line 7)",
		"relay:\n  retention: {keep: 1h, batch: 0}\n":                                "", // 0 is the default
		"relay:\n  retention: {keep: 1h, batch: 100001}\n":                           "relay.retention.batch: 100001 is outside 1..100000 (line 7)",
		"relay:\n  retention: {keep: 1h, pause: -5ms}\n":                             "relay.retention.pause: -5ms is negative (line 7)",
		"relay:\n  retention: {keep: 1h, column: " + strings.Repeat("c", 64) + "}\n": "relay.retention.column: \"ccc",
		"relay:\n  retention: {keep: 1h, marks_table: marks}\n":                      "relay.retention.marks_table: \"marks\" is not schema.table",
		"relay:\n  retention:\n    keep: 1h\n    kepp: 2h\n":                         "relay.retention.kepp: unknown key \"kepp\"",
		"relay:\n  retention: {keep: a week}\n":                                      "relay.retention.keep: \"a week\" is not a duration",
		"relay:\n  retention: {keep: 1h, batch: many}\n":                             "relay.retention.batch: \"many\" is not a whole number",
		"relay:\n  retention: {keep: 1h, margin: 0s, interval: 1s}\n":                "",
	} {
		_, err := Parse([]byte(minimal+y), env(nil))
		switch {
		case want == "" && err != nil:
			t.Errorf("%q: unexpected error %v", y, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%q:\n got %v\nwant %q", y, err, want)
		}
	}
}
