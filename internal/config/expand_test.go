package config

import (
	"strings"
	"testing"
	"time"
)

// yamlSpecials are secrets made of what YAML would read as something else
// if they were YAML text: aliases, anchors, escapes, flow syntax, a
// comment, quotes, null, booleans and numbers.
var yamlSpecials = []string{
	"null", "~", "true", "0123", "1e3", "*abc", "&x y", `a\b`, `a\"b`, "x, key: v", "[1,2]", "{a: b}", "#c", "'q'", `"dq"`,
	"- item", "key: value", "|", ">", "!!int 5", "%zz", "$", "$$", "${", "${NESTED}", "a\nb", " lead", "trail ", "",
}

// TestExpandedValuesAreTakenLiterally: a variable's value is never read as
// YAML: a string setting receives exactly its bytes, in the main file and
// in a sink's own settings (read through Sink.Decode).
func TestExpandedValuesAreTakenLiterally(t *testing.T) {
	y := `
postgres:
  url: postgres://app@h/db
http:
  listen: ${PW}
sinks:
  - name: events
    kind: kafka
    sasl:
      mechanism: PLAIN
      username: u
      password: ${PW}
    brokers: ["${BROKER:-h:9092}"]
`
	for _, pw := range yamlSpecials {
		c, err := Parse([]byte(y), env(map[string]string{"PW": pw}))
		if err != nil {
			t.Errorf("PW=%q: %v", pw, err)
			continue
		}
		if c.HTTP.Listen != pw {
			t.Errorf("PW=%q: http.listen = %q", pw, c.HTTP.Listen)
		}
		var kc struct {
			Brokers []string `yaml:"brokers"`
			SASL    struct {
				Mechanism, Username, Password string
			} `yaml:"sasl"`
		}
		if err := c.Sinks[0].Decode(&kc); err != nil {
			t.Errorf("PW=%q: Decode: %v", pw, err)
			continue
		}
		if kc.SASL.Password != pw || len(kc.Brokers) != 1 || kc.Brokers[0] != "h:9092" {
			t.Errorf("PW=%q: sasl.password = %q, brokers = %q", pw, kc.SASL.Password, kc.Brokers)
		}
	}
}

// TestExpandedPasswordInTheURL: YAML-special passwords reach postgres.url
// unchanged (the ones a URL can hold unescaped).
func TestExpandedPasswordInTheURL(t *testing.T) {
	for _, pw := range []string{"null", "true", "0123", "*abc", "&x", `a\b`, "[1,2]", "#c", "'q'", `"dq"`, "p:w", "p?w", "$"} {
		c, err := Parse([]byte("postgres:\n  url: postgres://app:${PW}@h/db\nsinks: [{name: out, kind: stdout}]\n"), env(map[string]string{"PW": pw}))
		if err != nil {
			t.Errorf("PW=%q: %v", pw, err)
			continue
		}
		if want := "postgres://app:" + pw + "@h/db"; c.Postgres.URL != want {
			t.Errorf("PW=%q: url = %q, want %q", pw, c.Postgres.URL, want)
		}
	}
}

// TestExpandedValuesOfOtherTypes: a reference in a number, boolean or
// duration setting is read as one; an empty value leaves the default.
func TestExpandedValuesOfOtherTypes(t *testing.T) {
	y := `
postgres:
  url: postgres://app@h/db
  status_interval: ${SI}
  heartbeat_interval: ${HB}
relay:
  window_messages: ${N}
  procs: ${P}
http:
  pprof: ${F}
sinks:
  - {name: f, kind: file, path: /tmp/x, fsync: "${FSYNC}"}
`
	c, err := Parse([]byte(y), env(map[string]string{"SI": "2s", "HB": "", "N": "500", "P": "", "F": "true", "FSYNC": "false"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Postgres.StatusInterval.D() != 2*time.Second || c.Postgres.HeartbeatInterval.D() != 10*time.Second ||
		c.Relay.WindowMessages != 500 || *c.Relay.Procs != 1 || !c.HTTP.Pprof {
		t.Fatalf("got %+v %+v %+v", c.Postgres, c.Relay, c.HTTP)
	}
	var fc struct {
		Path  string `yaml:"path"`
		Fsync *bool  `yaml:"fsync"`
	}
	if err := c.Sinks[0].Decode(&fc); err != nil || fc.Fsync == nil || *fc.Fsync {
		t.Fatalf("fsync: %v, %v", fc.Fsync, err)
	}

	_, err = Parse([]byte(y), env(map[string]string{"SI": "2s", "HB": "", "N": "lots-of-Secret", "P": "", "F": "true", "FSYNC": ""}))
	if err == nil || err.Error() != "relay.window_messages: the value from ${N} is not a whole number (line 7)" {
		t.Fatalf("err = %v", err)
	}
}

// TestUnsetVariableNamesTheFieldAndLine: a reference to an unset variable
// without a default is an error naming the setting; only values are
// expanded, so one in a comment or a key is not a reference.
func TestUnsetVariableNamesTheFieldAndLine(t *testing.T) {
	_, err := Parse([]byte("# ${NOT_IN_A_COMMENT}\npostgres:\n  url: postgres://app:${PGPASS}@h/db\nsinks: [{name: out, kind: stdout}]\n"), env(nil))
	want := "postgres.url: environment variable PGPASS is not set (referenced as ${PGPASS}; use ${PGPASS:-default} for a default) (line 3)"
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v\nwant  %s", err, want)
	}
	_, err = Parse([]byte("postgres: {url: 'postgres://x'}\nsinks:\n  - name: a\n    kind: kafka\n    brokers: [h:1, '${B}']\n"), env(nil))
	if err == nil || !strings.HasPrefix(err.Error(), "sinks[0].brokers[1]: environment variable B is not set") || !strings.HasSuffix(err.Error(), "(line 5)") {
		t.Fatalf("err = %v", err)
	}
	_, err = Parse([]byte("postgres: {url: 'postgres://x'}\n${KEY}: 1\nsinks: [{name: out, kind: stdout}]\n"), env(map[string]string{"KEY": "relay"}))
	if err == nil || !strings.Contains(err.Error(), `unknown key "${KEY}"`) {
		t.Fatalf("a key was expanded: %v", err)
	}
	// A lone $ and $$ are kept.
	c, err := Parse([]byte("postgres: {url: 'postgres://app:p$w$$@h/db'}\nsinks: [{name: out, kind: stdout}]\n"), env(nil))
	if err != nil || c.Postgres.URL != "postgres://app:p$w$$@h/db" {
		t.Fatalf("got %v, %v", c, err)
	}
}

func TestUnquotedReferenceInAFlowCollectionSaysToQuoteIt(t *testing.T) {
	_, err := Parse([]byte("postgres: {url: ${URL}}\nsinks: [{name: out, kind: stdout}]\n"), env(map[string]string{"URL": "x"}))
	if err == nil || !strings.Contains(err.Error(), "not valid YAML") || !strings.Contains(err.Error(), "inside [ ] or { } must be quoted: '${VAR}'") {
		t.Fatalf("err = %v", err)
	}
}

func TestEnvOverridesWinAndAreNamedInErrors(t *testing.T) {
	y := "postgres: {url: 'postgres://x', slot: file_slot}\nsinks: [{name: out, kind: stdout}]\n"
	c, err := Parse([]byte(y), env(map[string]string{"CDC_POSTGRES_SLOT": "env_slot", "CDC_RELAY_WINDOW_MESSAGES": "7"}))
	if err != nil || c.Postgres.Slot != "env_slot" || c.Relay.WindowMessages != 7 {
		t.Fatalf("got %+v, %v", c, err)
	}
	_, err = Parse([]byte(y), env(map[string]string{"CDC_POSTGRES_SLOT": "Env-Slot"}))
	if err == nil || err.Error() != `postgres.slot: "Env-Slot" is not a replication slot name: PostgreSQL allows only lower-case letters, digits and _ (at most 63) (from CDC_POSTGRES_SLOT)` {
		t.Fatalf("err = %v", err)
	}
	_, err = Parse([]byte(y), env(map[string]string{"CDC_RELAY_WINDOW_MESSAGES": "lots"}))
	if err == nil || err.Error() != `relay.window_messages: "lots" is not a whole number (from CDC_RELAY_WINDOW_MESSAGES)` {
		t.Fatalf("err = %v", err)
	}
}
