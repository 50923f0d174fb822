package config

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/walpost/walpost/internal/redact"
)

const sinkLine = "sinks: [{name: out, kind: stdout}]\n"

// TestURLErrorsNeverRepeatThePassword: a malformed postgres.url is a
// configuration error naming the field, and no piece of the password is
// in it, whether the URL is written in the file, built with ${PW} or set
// by CDC_POSTGRES_URL.
func TestURLErrorsNeverRepeatThePassword(t *testing.T) {
	const pw = "Sup3rS3cret"
	for _, tmpl := range []string{
		"postgres://u:PW@h/%zz",                        // a bad escape
		"postgres://u:PW@h/db name",                    // a space
		"postgres://u:PW@[::1",                         // an unclosed bracket
		"postgres://u:PW@h:port/db",                    // a bad port
		"postgres://u:PW@h:99999/db",                   // a port out of range
		"postgres://u:PW@h/db?sslmode=maybe",           // a bad sslmode
		"postgres://u:PW@h/db?sslmode",                 // a parameter without '='
		"postgres://u:PW",                              // no host: the password is read as a port
		"postgres://u:Sup3r@S3cret@h/db",               // an unescaped '@' in the password
		"postgres://u:Sup3r/S3cret@h/db",               // an unescaped '/'
		"postgres://u:Sup3r%S3cret@h/db",               // an unescaped '%'
		"postgres://u:Sup3r S3cret@h/db",               // a space in the password
		"postgres://u@h/db?password=Sup3r&S3cret",      // an unescaped '&'
		"postgres://u@h/db?password=Sup3r=S3cret",      // an unescaped '='
		"postgres://u:PW@h/db?target_session_attrs=PW", // a value that pgconn quotes
		"postgres://u:PW@h/db?sslrootcert=/no/such/PW.pem",
		"host=h password='PW dbname=d",     // an unbalanced quote
		"host=h password=PW sslmode=maybe", // a bad sslmode
		"host=h password=PW port=PW",       // a bad port
		"host=h password=PW target_session_attrs=PW",
		"PW host=h",                    // a stray word
		"host=h password=Sup3r S3cret", // an unquoted space
		"postgres:/u:PW@h/db",          // one slash
	} {
		url := strings.ReplaceAll(tmpl, "PW", pw)
		for _, how := range []struct {
			name string
			yaml string
			env  map[string]string
		}{
			{"in the file", "postgres:\n  url: " + strconv.Quote(url) + "\n" + sinkLine, nil},
			{"from ${PW}", "postgres:\n  url: " + strconv.Quote(strings.ReplaceAll(tmpl, "PW", "${PW}")) + "\n" + sinkLine, map[string]string{"PW": pw}},
			{"from CDC_POSTGRES_URL", "postgres: {url: 'postgres://x'}\n" + sinkLine, map[string]string{"CDC_POSTGRES_URL": url}},
		} {
			_, err := Parse([]byte(how.yaml), env(how.env))
			if err == nil {
				t.Errorf("%s %s: no error", url, how.name)
				continue
			}
			if !strings.HasPrefix(err.Error(), "postgres.url: ") {
				t.Errorf("%s %s: %v does not name postgres.url", url, how.name, err)
			}
			for _, piece := range []string{"Sup3r", "S3cret", "p3rS3"} {
				if strings.Contains(err.Error(), piece) {
					t.Errorf("%s %s: %v repeats %q", url, how.name, err, piece)
				}
			}
		}
	}
}

// TestURLErrorsKeepPgconnsReason: the reason is kept when it quotes
// nothing of the password.
func TestURLErrorsKeepPgconnsReason(t *testing.T) {
	for url, want := range map[string]string{
		"postgres://u:pw@h/%zz":              `postgres.url: not a valid connection URL (invalid percent-encoded token: "%zz"); the URL is not repeated here because it may hold a password (line 2)`,
		"postgres://u:pw@h/db?sslmode=maybe": `postgres.url: not a valid connection URL (failed to configure TLS: sslmode is invalid); the URL is not repeated here because it may hold a password (line 2)`,
		"postgres://u:pw@[::1":               `postgres.url: not a valid connection URL (end of string reached when looking for matching "]" in IPv6 host address in URI); the URL is not repeated here because it may hold a password (line 2)`,
		"postgres://u:p@w@h/db":              `postgres.url: the host holds an '@' (write an '@' in the user name or password as %40); the URL is not repeated here because it may hold a password (line 2)`,
	} {
		_, err := Parse([]byte("postgres:\n  url: "+strconv.Quote(url)+"\n"+sinkLine), env(nil))
		if err == nil || err.Error() != want {
			t.Errorf("%s:\n got %v\nwant %s", url, err, want)
		}
	}
}

// TestSecretsListsEveryPassword: Secrets finds the password of the URL in
// both forms and every secret among the sinks' settings, and nothing that
// is not one.
func TestSecretsListsEveryPassword(t *testing.T) {
	y := `
postgres:
  url: postgres://app:pg%2Fpass@h/db?sslpassword=keypass
sinks:
  - name: k
    kind: kafka
    brokers: [h:9092]
    tls: {enabled: true, key_file: /etc/key.pem, ca_file: /etc/ca.pem}
    sasl: {mechanism: PLAIN, username: alice, password: "${KAFKA_PW}"}
  - name: sb
    kind: servicebus
    connection_string: "Endpoint=sb://ns/;SharedAccessKeyName=send;SharedAccessKey=sbKEY123="
    queue: q
  - name: x
    kind: webhook
    endpoint: https://bob:webpass@hooks.example/x
    api_key: apikey123
    headers: {Authorization: Bearer tok123, X-Trace: "on", X-Custom-Key: k3y-abcdef12}
    token: null
`
	c, err := Parse([]byte(y), env(map[string]string{"KAFKA_PW": "*kafka pw"}))
	if err != nil {
		t.Fatal(err)
	}
	got := c.Secrets()
	for _, want := range []string{"pg%2Fpass", "pg/pass", "keypass", "*kafka pw", "sbKEY123=",
		"Endpoint=sb://ns/;SharedAccessKeyName=send;SharedAccessKey=sbKEY123=", "webpass", "apikey123", "Bearer tok123", "k3y-abcdef12"} {
		if !slices.Contains(got, want) {
			t.Errorf("Secrets() = %q, want %q among them", got, want)
		}
	}
	for _, not := range []string{"/etc/key.pem", "/etc/ca.pem", "alice", "q", "h:9092", "on", "send", "null", "PLAIN"} {
		if slices.Contains(got, not) {
			t.Errorf("Secrets() = %q holds %q, which is not a secret", got, not)
		}
	}

	set := redact.NewSet(got...)
	line := `{"level":"error","error":"auth failed: pg/pass *kafka pw sbKEY123= webpass apikey123 tok123"}`
	if out := set.Redact(line); strings.ContainsAny(out, "/*=") || strings.Contains(out, "pass") {
		t.Errorf("a Set of Secrets() left %q", out)
	}
}

func TestSecretsOfAKeyValueURLAndOfTheEnvironment(t *testing.T) {
	t.Setenv("PGPASSWORD", "fromPGPASSWORD")
	c, err := Parse([]byte("postgres:\n  url: \"host=h password='dsn pass' dbname=d\"\n"+sinkLine), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Secrets(); !slices.Contains(got, "dsn pass") || !slices.Contains(got, "'dsn pass'") {
		t.Errorf("Secrets() = %q", got)
	}
	c, err = Parse([]byte("postgres:\n  url: postgres://app@h/db\n"+sinkLine), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Secrets(); !slices.Contains(got, "fromPGPASSWORD") {
		t.Errorf("Secrets() = %q lacks the password pgconn takes from PGPASSWORD", got)
	}
}

// TestValidURLsWithSpecialPasswords: passwords with characters libpq
// reads as they are (or escaped) are accepted, and Secrets has them.
func TestValidURLsWithSpecialPasswords(t *testing.T) {
	for url, pw := range map[string]string{
		"postgres://u:p%40ss@h/db":      "p@ss",
		"postgres://u:p:w@h/db":         "p:w",
		"postgres://u:p#w?x@h/db":       "p#w?x",
		"postgres://u:'q\"@h/db":        `'q"`,
		"host=h password='a b\\'c'":     "a b'c",
		"postgresql://u:a%2Fb@h1,h2/db": "a/b",
	} {
		c, err := Parse([]byte("postgres:\n  url: "+strconv.Quote(url)+"\n"+sinkLine), env(nil))
		if err != nil {
			t.Errorf("%s: %v", url, err)
			continue
		}
		if got := c.Secrets(); !slices.Contains(got, pw) {
			t.Errorf("%s: Secrets() = %q, want %q", url, got, pw)
		}
	}
}

// TestSecretsOfTheKafkaSASLMechanisms: the Event Hubs connection string
// (and its SharedAccessKey), an OAUTHBEARER token and the AWS_MSK_IAM
// secret key and session token are secrets; the access key id, the token
// file's path and $ConnectionString are not.
func TestSecretsOfTheKafkaSASLMechanisms(t *testing.T) {
	y := `
postgres:
  url: postgres://app@h/db
sinks:
  - name: hubs
    kind: kafka
    brokers: [ns.servicebus.windows.net:9093]
    topic: t
    tls: {enabled: true}
    sasl: {mechanism: PLAIN, username: $ConnectionString, password: "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=root;SharedAccessKey=ehKEY456="}
  - name: oauth
    kind: kafka
    brokers: [h:9092]
    topic: t
    sasl: {mechanism: OAUTHBEARER, token: eyJtoken789}
  - name: oauthfile
    kind: kafka
    brokers: [h:9092]
    topic: t
    sasl: {mechanism: OAUTHBEARER, token_file: /run/token}
  - name: msk
    kind: kafka
    brokers: [h:9098]
    topic: t
    tls: {enabled: true}
    sasl: {mechanism: AWS_MSK_IAM, access_key_id: AKIAID, secret_access_key: awsSECRET, session_token: awsSESSION}
`
	c, err := Parse([]byte(y), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	got := c.Secrets()
	for _, want := range []string{"ehKEY456=", "eyJtoken789", "awsSECRET", "awsSESSION"} {
		if !slices.Contains(got, want) {
			t.Errorf("Secrets() = %q, want %q among them", got, want)
		}
	}
	for _, not := range []string{"$ConnectionString", "/run/token", "AKIAID"} {
		if slices.Contains(got, not) {
			t.Errorf("Secrets() = %q holds %q, which is not a secret", got, not)
		}
	}
}
