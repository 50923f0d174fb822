package natsjs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/sinktest"
)

// TestConfigErrorsNameTheField: every bad setting is refused through the
// registry, as the relay prepares sinks, with the sink and the field
// named.
func TestConfigErrorsNameTheField(t *testing.T) {
	seed := filepath.Join(t.TempDir(), "seed.nk")
	if err := os.WriteFile(seed, []byte("SUAx"), 0o600); err != nil {
		t.Fatal(err)
	}
	const ok = "servers: [\"nats://127.0.0.1:4222\"]\n"
	for _, c := range []struct{ yaml, want string }{
		{"subject: outbox.{type}\n", "servers: empty"},
		{ok, "subject: empty"},
		{"servers: [\"127.0.0.1\"]\nsubject: s\n", "servers[0]: \"127.0.0.1\" is not host:port"},
		{"servers: [\"http://h:1\"]\nsubject: s\n", "servers[0]"},
		{"servers: [\"h:99999\"]\nsubject: s\n", "servers[0]"},
		{ok + "subject: outbox.{tpye}\n", "subject: \"outbox.{tpye}\" has the unknown placeholder"},
		{ok + "subject: outbox..{type}\n", "subject: template \"outbox..{type}\""},
		{ok + "subject: \"outbox.*\"\n", "subject: \"outbox.*\""},
		{ok + "subject: \"out box\"\n", "subject: \"out box\""},
		{ok + "subject: s\nmax_pending: 100000\n", "max_pending: 100000 is outside"},
		{ok + "subject: s\nack_timeout: 1ms\n", "ack_timeout: 1ms is outside"},
		{ok + "subject: s\nconnect_timeout: 1h\n", "connect_timeout: 1h0m0s is outside"},
		{ok + "subject: s\ntoken: t\nuser: u\npassword: p\n", "user: set together with token"},
		{ok + "subject: s\nuser: u\n", "password: empty, but user is set"},
		{ok + "subject: s\npassword: p\n", "password: set, but user is empty"},
		{ok + "subject: s\ncredentials_file: /nonexistent/x.creds\n", "credentials_file: open /nonexistent/x.creds"},
		{ok + "subject: s\nnkey_seed_file: " + seed + "\n", "nkey_seed_file: " + seed},
		{ok + "subject: s\ntls: {ca_file: ca.pem}\n", "tls.ca_file: set, but tls.enabled is false"},
		{ok + "subject: s\ntls: {enabled: true, cert_file: c.pem}\n", "tls.key_file: empty"},
		{ok + "subject: s\ntls: {enabled: true, ca_file: /nonexistent/ca.pem}\n", "tls.ca_file: open /nonexistent/ca.pem"},
		{ok + "subject: s\nstream: {create: true}\n", "stream.name: empty, but stream.create is true"},
		{ok + "subject: s\nstream: {name: a.b}\n", "stream.name: \"a.b\""},
		{ok + "subject: s\nstream: {name: x, subjects: [a]}\n", "stream.subjects: set, but stream.create is false"},
		{ok + "subject: \"{type}\"\nstream: {name: x, create: true}\n", "stream.subjects: empty"},
		{ok + "subject: s\nstream: {name: x, create: true, subjects: [\"a.>.b\"]}\n", "stream.subjects[0]"},
		{ok + "subject: s\nstream: {name: x, create: true, storage: disk}\n", "stream.storage: \"disk\""},
		{ok + "subject: s\nstream: {name: x, create: true, replicas: 7}\n", "stream.replicas: 7"},
		{ok + "subject: s\nformat: avro\n", "format: unknown \"avro\""},
		{ok + "subject: s\nsource: /x\n", "source: only used with format: cloudevents"},
		{ok + "subject: s\nformat: cloudevents\nsource: \"/x \"\n", "source: \"/x \": its value starts or ends with white space"},
		{ok + "subject: s\nbrokers: [a]\n", "brokers"},
	} {
		doc := "name: events\nkind: nats\n" + c.yaml
		_, err := publish.Prepare(0, sinktest.SinkConfig(t, doc), zerolog.Nop())
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "sinks[0]") {
			t.Errorf("%s: err = %v, want one naming sinks[0] and containing %q", c.yaml, err, c.want)
		}
	}
}

// TestConfigDefaults: the documented defaults, and stream.create's
// subjects from the template's wildcard form.
func TestConfigDefaults(t *testing.T) {
	var c natsConfig
	doc := "name: events\nkind: nats\nservers: [\"h:4222\"]\nsubject: outbox.{type}.v1\nstream: {name: OUTBOX, create: true}\n"
	if err := publish.DecodeSettings(sinktest.SinkConfig(t, doc), &c); err != nil {
		t.Fatal(err)
	}
	if c.MaxPending != 512 || c.AckTimeout.D().String() != "10s" || c.ConnectTimeout.D().String() != "10s" ||
		c.ClientName != "walpost" || c.Format != "raw" || c.Stream.Storage != "file" || c.Stream.Replicas != 1 ||
		c.Stream.DuplicateWindow.D().String() != "2m0s" || len(c.Stream.Subjects) != 1 || c.Stream.Subjects[0] != "outbox.>" {
		t.Errorf("defaults: %+v", c)
	}
}

// TestSubjectWildcardForms: the stream subjects stream.create uses by
// default cover every expansion of the template.
func TestSubjectWildcardForms(t *testing.T) {
	for text, want := range map[string]string{
		"outbox.{type}":       "outbox.>",
		"a.b.{key}.c":         "a.b.>",
		"a.pre{type}":         "a.>",
		"fixed.subject":       "fixed.subject",
		"{type}":              ">",
		"outbox.{type}.{key}": "outbox.>",
	} {
		tmpl, err := parseSubject(text)
		if err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		if got := tmpl.wildcard(); got != want {
			t.Errorf("%s: wildcard %q, want %q", text, got, want)
		}
	}
}
