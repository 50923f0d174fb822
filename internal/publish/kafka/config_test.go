package kafka

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/sinktest"
)

func TestConfigErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want string
	}{
		{`topic: t`, "brokers: empty"},
		{`brokers: ["nohost"], topic: t`, `brokers[0]: "nohost" is not host:port`},
		{`brokers: ["h:1", "h:99999"], topic: t`, `brokers[1]: "h:99999": port "99999" is not 1..65535`},
		{`brokers: ["h:9092"]`, "topic: empty"},
		{`brokers: ["h:9092"], topic: "outbox.{tpye}"`, "topic: \"outbox.{tpye}\" has the unknown placeholder {tpye} (use {type} or {key})"},
		{`brokers: ["h:9092"], topic: "outbox.{type"`, "topic: \"outbox.{type\" has a '{' without '}'"},
		{`brokers: ["h:9092"], topic: "out box"`, "topic: \"out box\": kafka: illegal topic name: character ' ' at offset 3"},
		{`brokers: ["h:9092"], topic: "out/{type}"`, "topic: template \"out/{type}\": kafka: illegal topic name: character '/'"},
		{`brokers: ["h:9092"], topic: ".."`, `topic: "..": kafka: illegal topic name: ".." is reserved`},
		{`brokers: ["h:9092"], topic: "` + strings.Repeat("t", 250) + `"`, "250 characters, over Kafka's limit of 249"},
		{`brokers: ["h:9092"], topic: t, acks: 1`, `acks: "1" is not all, leader or none`},
		{`brokers: ["h:9092"], topic: t, batch_bytes: 10`, "batch_bytes: 10 is outside 1024..1073741824"},
		{`brokers: ["h:9092"], topic: t, batch_size: 0`, ""}, // 0 means the default
		{`brokers: ["h:9092"], topic: t, batch_size: -1`, "batch_size: -1 is outside 1..100000"},
		{`brokers: ["h:9092"], topic: t, linger: 10s`, "linger: 10s is outside 0s..5s"},
		{`brokers: ["h:9092"], topic: t, linger: soon`, `"soon" is not a duration`},
		{`brokers: ["h:9092"], topic: t, compression: brotli`, `compression: "brotli" is not none, gzip, snappy, lz4 or zstd`},
		{`brokers: ["h:9092"], topic: t, timeout: 1ms`, "timeout: 1ms is outside 100ms..10m0s"},
		{`brokers: ["h:9092"], topic: t, tpoic: x`, `unknown key "tpoic"`},
		{`brokers: ["h:9092"], topic: t, tls: {ca_file: ca.pem}`, "tls.ca_file: set, but tls.enabled is false"},
		{`brokers: ["h:9092"], topic: t, tls: {enabled: true, cert_file: c.pem}`, "tls.key_file: empty, but tls.cert_file is set"},
		{`brokers: ["h:9092"], topic: t, tls: {enabled: true, ca_file: /does/not/exist.pem}`, "tls.ca_file: open /does/not/exist.pem"},
		{`brokers: ["h:9092"], topic: t, tls: {enabled: true, cafile: x}`, `unknown key "cafile"`},
		{`brokers: ["h:9092"], topic: t, sasl: {username: u, password: p}`, "sasl.mechanism: empty"},
		{`brokers: ["h:9092"], topic: t, sasl: {mechanism: GSSAPI, username: u, password: p}`, `sasl.mechanism: "GSSAPI" is not PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER or AWS_MSK_IAM`},
		{`brokers: ["h:9092"], topic: t, sasl: {mechanism: plain, username: u, password: p, token: x}`, "sasl.token: not used with sasl.mechanism PLAIN"},
		{`brokers: ["h:9092"], topic: t, sasl: {mechanism: oauthbearer, token: eyJ}`, ""},
		{`brokers: ["h:9092"], topic: t, sasl: {mechanism: OAUTHBEARER}`, "sasl.token: give sasl.token"},
		{`brokers: ["h:9092"], topic: t, sasl: {mechanism: OAUTHBEARER, token: a, token_file: /x}`, "sasl.token: give sasl.token"},
		{`brokers: ["h:9092"], topic: t, sasl: {mechanism: OAUTHBEARER, token_file: /does/not/exist}`, "sasl.token_file: open /does/not/exist"},
		{`brokers: ["h:9092"], topic: t, sasl: {mechanism: OAUTHBEARER, username: u, token: a}`, "sasl.username: not used with sasl.mechanism OAUTHBEARER"},
		{`brokers: ["h:9098"], topic: t, sasl: {mechanism: aws_msk_iam}`, "sasl.mechanism: AWS_MSK_IAM needs tls.enabled: true"},
		{`brokers: ["h:9098"], topic: t, tls: {enabled: true}, sasl: {mechanism: aws_msk_iam}`, ""},
		{`brokers: ["h:9098"], topic: t, tls: {enabled: true}, sasl: {mechanism: AWS_MSK_IAM, access_key_id: AKIA, secret_access_key: s, session_token: t}`, ""},
		{`brokers: ["h:9098"], topic: t, tls: {enabled: true}, sasl: {mechanism: AWS_MSK_IAM, access_key_id: AKIA}`, "sasl.secret_access_key: give sasl.access_key_id and sasl.secret_access_key together"},
		{`brokers: ["h:9098"], topic: t, tls: {enabled: true}, sasl: {mechanism: AWS_MSK_IAM, session_token: t}`, "sasl.session_token: only with sasl.access_key_id"},
		{`brokers: ["h:9098"], topic: t, tls: {enabled: true}, sasl: {mechanism: AWS_MSK_IAM, username: u}`, "sasl.username: not used with sasl.mechanism AWS_MSK_IAM"},
		{`brokers: ["h:9092"], topic: t, sasl: {mechanism: plain, password: p}`, "sasl.username: empty"},
		{`brokers: ["h:9092"], topic: t, sasl: {mechanism: scram-sha-256, username: u}`, "sasl.password: empty"},
		{`brokers: ["h:9092"], topic: t, sasl: {mechanism: scram-sha-512, username: u, password: p}`, ""},
		{`brokers: ["h:9092"], topic: t, format: avro`, `format: unknown "avro" (raw or cloudevents)`},
		{`brokers: ["h:9092"], topic: t, source: /orders`, "source: only used with format: cloudevents"},
		{`brokers: ["h:9092"], topic: t, format: raw, source: /orders`, "source: only used with format: cloudevents"},
		{`brokers: ["h:9092"], topic: t, format: cloudevents, source: "%zz"`, `source: "%zz" is not a URI reference`},
		{`brokers: ["h:9092"], topic: t, format: cloudevents`, ""},
		{`brokers: ["h:9092"], topic: t, format: cloudevents, source: urn:example:orders`, ""},
		{`brokers: ["h:9092"], topic: t, exactly_once: true`, ""},
		{`brokers: ["h:9092"], topic: t, exactly_once: true, progress_topic: my.progress`, ""},
		{`brokers: ["h:9092"], topic: t, exactly_once: true, acks: leader`, "exactly_once: needs acks: all"},
		{`brokers: ["h:9092"], topic: t, progress_topic: p`, "progress_topic: only with exactly_once: true"},
		{`brokers: ["h:9092"], topic: t, exactly_once: true, progress_topic: "p/q"`, "progress_topic: \"p/q\": kafka: illegal topic name"},
		{`brokers: ["h:9092"], topic: t, exactly_once: true, progress_topic: "p.{type}"`, "progress_topic: \"p.{type}\": a fixed name"},
		{`brokers: ["h:9092"], topic: t, protocol_version: "2.1"`, ""},
		{`brokers: ["h:9092"], topic: t, protocol_version: "3.7.1"`, ""},
		{`brokers: ["h:9092"], topic: t, protocol_version: "latest"`, `protocol_version: "latest" is not a Kafka release franz-go knows (write it as 2.1 or 3.7)`},
		{`brokers: ["h:9092"], topic: t, protocol_version: "9.9"`, `protocol_version: "9.9" is not a Kafka release`},
	} {
		doc := "{name: events, kind: kafka, " + tc.yaml + "}"
		_, err := New(sinktest.SinkConfig(t, doc), zerolog.Nop())
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: unexpected error %v", tc.yaml, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: got error %v, want one containing %q", tc.yaml, err, tc.want)
		}
	}
}

func TestRegistryPrefixesTheSink(t *testing.T) {
	_, err := publish.Open(context.Background(), 3, sinktest.SinkConfig(t, "name: events\nkind: kafka\ntopic: t\n"), zerolog.Nop())
	if err == nil || err.Error() != "sinks[3] (events): brokers: empty (list at least one, e.g. [\"127.0.0.1:9092\"])" {
		t.Fatalf("got %v", err)
	}
}

func TestDefaultsTuneForLatencyAndSafety(t *testing.T) {
	s := newSink(t, []string{"127.0.0.1:9"}, "outbox.{type}")
	cl := s.client
	if a := cl.OptValue(kgo.RequiredAcks).(kgo.Acks); a != kgo.AllISRAcks() {
		t.Errorf("acks %v, want all", a)
	}
	if cl.OptValue(kgo.DisableIdempotentWrite).(bool) {
		t.Error("the idempotent producer is off with acks: all")
	}
	if m, b, n := cl.OptValue(kgo.ManualFlushing).(bool), cl.OptValue(kgo.ProducerBatchMaxBytes).(int32), cl.OptValue(kgo.MaxBufferedRecords).(int64); !m || b != 1<<20 || n != 1000 {
		t.Errorf("manual flushing %v, batch bytes %d, buffered records %d; want true (Publish flushes), 1MiB, 1000", m, b, n)
	}
	if cl.OptValue(kgo.AllowAutoTopicCreation).(bool) || cl.OptValue(kgo.ClientID).(string) != "walpost" {
		t.Errorf("auto-create %v, client id %q", cl.OptValue(kgo.AllowAutoTopicCreation), cl.OptValue(kgo.ClientID))
	}
	if d := cl.OptValue(kgo.ProduceRequestTimeout).(time.Duration); d != 5*time.Second || s.timeout != 5*time.Second { // newSink sets timeout: 5s
		t.Errorf("produce request timeout %s, call timeout %s, want the configured 5s", d, s.timeout)
	}
	if d := cl.OptValue(kgo.RecordDeliveryTimeout).(time.Duration); d != 0 {
		t.Errorf("record delivery timeout %s, want none (kgo counts it from the record's timestamp, the commit time)", d)
	}

	s = newSink(t, []string{"127.0.0.1:9"}, "t", "acks: leader", "linger: 0s", "compression: zstd", "client_id: me", "auto_create_topics: true")
	cl = s.client
	if cl.OptValue(kgo.RequiredAcks).(kgo.Acks) != kgo.LeaderAck() || !cl.OptValue(kgo.DisableIdempotentWrite).(bool) ||
		cl.OptValue(kgo.ClientID).(string) != "me" || !cl.OptValue(kgo.AllowAutoTopicCreation).(bool) {
		t.Errorf("settings not applied: acks %v, idempotency off %v, client id %v, auto-create %v", cl.OptValue(kgo.RequiredAcks),
			cl.OptValue(kgo.DisableIdempotentWrite), cl.OptValue(kgo.ClientID), cl.OptValue(kgo.AllowAutoTopicCreation))
	}
}

func TestNameIsTheConfiguredName(t *testing.T) {
	if n := newSink(t, []string{"127.0.0.1:9"}, "t").Name(); n != "events" {
		t.Errorf("Name() = %q", n)
	}
}

func TestCloseIsIdempotent(t *testing.T) {
	s := newSink(t, []string{"127.0.0.1:9"}, "t")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestKindIsRegistered(t *testing.T) {
	for _, k := range publish.Kinds() {
		if k == "kafka" {
			return
		}
	}
	t.Fatalf("kind kafka not registered: %v", publish.Kinds())
}
