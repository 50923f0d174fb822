package config

import (
	"strings"
	"testing"

	pgoutput "github.com/walpost/walpost/internal/decoder"
	"github.com/walpost/walpost/outbox"
)

// TestMessagesSourceDefaultsAndKeys: postgres.source defaults to table;
// messages takes message_prefix (default walpost).
func TestMessagesSourceDefaultsAndKeys(t *testing.T) {
	c, err := Parse([]byte(minimal), env(nil))
	if err != nil || c.Postgres.Source != SourceTable || c.Postgres.MessagePrefix != "" || c.Postgres.TableLess() {
		t.Fatalf("default source: %v %+v", err, c.Postgres)
	}
	y := "postgres:\n  url: postgres://u@h/db\n  source: messages\nsinks: [{name: out, kind: stdout}]\n"
	c, err = Parse([]byte(y), env(nil))
	if err != nil || !c.Postgres.TableLess() || c.Postgres.MessagePrefix != DefaultMessagePrefix {
		t.Fatalf("source: messages: %v %+v", err, c.Postgres)
	}
	c, err = Parse([]byte(strings.Replace(y, "source: messages", "source: messages\n  message_prefix: app.outbox", 1)), env(nil))
	if err != nil || c.Postgres.MessagePrefix != "app.outbox" {
		t.Fatalf("message_prefix: %v %+v", err, c.Postgres)
	}
}

// TestMessagesSourceErrorsNameTheField: a bad source or prefix, a prefix
// walpost's own messages use, and the settings of a table (postgres.table,
// columns:, relay.retention, also from CDC_POSTGRES_TABLE) with a
// table-less outbox are refused naming the field; message_prefix with a
// table too.
func TestMessagesSourceErrorsNameTheField(t *testing.T) {
	base := "postgres:\n  url: postgres://u@h/db\n  source: messages\n%s\nsinks: [{name: out, kind: stdout}]\n"
	for _, c := range []struct {
		yaml, env, want string
	}{
		{"  message_prefix: walpost_heartbeat", "", `postgres.message_prefix: "walpost_heartbeat" starts with "walpost_heartbeat"`},
		{"  message_prefix: walpost_heartbeat_x", "", `starts with "walpost_heartbeat"`},
		{"  message_prefix: walpost.adopt.s1", "", `starts with "walpost.adopt."`},
		{"  message_prefix: \"a\\0b\"", "", "postgres.message_prefix: "},
		{"  table: public.outbox", "", "postgres.table: not used with postgres.source: messages"},
		{"columns: {id: msg_id}", "", "columns: not used with postgres.source: messages"},
		{"relay: {retention: {keep: 1h}}", "", "relay.retention: not used with postgres.source: messages"},
		{"", "public.events", "postgres.table: not used with postgres.source: messages"},
		{"  message_keys: [short]", "", "postgres.message_keys[0]: 5 bytes; a key needs at least 16"},
		{"  message_roles: ['']", "", "postgres.message_roles[0]: not a role name"},
	} {
		vars := map[string]string{}
		if c.env != "" {
			vars["CDC_POSTGRES_TABLE"] = c.env
		}
		y := strings.Replace(base, "%s", c.yaml, 1)
		_, err := Parse([]byte(y), env(vars))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.yaml, err, c.want)
		}
	}
	for y, want := range map[string]string{
		"postgres:\n  url: postgres://u@h/db\n  source: rows\nsinks: [{name: out, kind: stdout}]\n":                     `postgres.source: "rows" is not table or messages`,
		"postgres:\n  url: postgres://u@h/db\n  message_prefix: app\nsinks: [{name: out, kind: stdout}]\n":              "postgres.message_prefix: only used with postgres.source: messages",
		"postgres:\n  url: postgres://u@h/db\n  source: table\n  message_prefix: x\nsinks: [{name: o, kind: stdout}]\n": "postgres.message_prefix: only used",
		"postgres:\n  url: postgres://u@h/db\n  message_keys: [0123456789abcdef]\nsinks: [{name: o, kind: stdout}]\n":   "postgres.message_keys: only used with postgres.source: messages",
	} {
		if _, err := Parse([]byte(y), env(nil)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", y, err, want)
		}
	}
}

// TestReservedPrefixesAreWalpostsOwn: the prefixes a table-less outbox may
// not use are the decoder's heartbeat and adopt prefixes; the default
// prefix is outbox.Emit's.
func TestReservedPrefixesAreWalpostsOwn(t *testing.T) {
	if outbox.DefaultPrefix != DefaultMessagePrefix {
		t.Fatalf("outbox.DefaultPrefix %q, postgres.message_prefix's default %q", outbox.DefaultPrefix, DefaultMessagePrefix)
	}
	if !strings.HasPrefix(pgoutput.HeartbeatPrefix, reservedPrefixes[0]) || !strings.HasPrefix(pgoutput.AdoptPrefix("s"), reservedPrefixes[1]) {
		t.Fatalf("reserved %q; the decoder's are %q and %q", reservedPrefixes, pgoutput.HeartbeatPrefix, pgoutput.AdoptPrefix("s"))
	}
}
