package kafka

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/envelope"
	"github.com/walpost/walpost/internal/publish/sinktest"
)

func TestTopicTemplateExpandsAndChecksEachName(t *testing.T) {
	msg := func(typ, key string, hasKey bool) *message.Message {
		return &message.Message{ID: "0190a0a0-0000-7000-8000-000000000001", Type: typ, Key: key, HasKey: hasKey}
	}
	for _, tc := range []struct {
		tmpl    string
		m       *message.Message
		want    string
		illegal bool
	}{
		{"orders", msg("order.created", "k", true), "orders", false},
		{"outbox.{type}", msg("order.created", "k", true), "outbox.order.created", false},
		{"{type}", msg("Order_Paid-v2", "k", true), "Order_Paid-v2", false},
		{"outbox.{type}.{key}", msg("t", "tenant-1", true), "outbox.t.tenant-1", false},
		{"by-key.{key}", msg("t", "", false), "by-key.0190a0a0-0000-7000-8000-000000000001", false},
		{"outbox.{type}", msg("order/created", "k", true), "outbox.order/created", true},
		{"outbox.{type}", msg("bestellung.erstellt.ä", "k", true), "outbox.bestellung.erstellt.ä", true},
		{"{type}", msg("..", "k", true), "..", true},
		{"{type}", msg(strings.Repeat("x", 250), "k", true), strings.Repeat("x", 250), true},
		{"{type}", msg(strings.Repeat("x", 249), "k", true), strings.Repeat("x", 249), false},
	} {
		tt, err := parseTopic(tc.tmpl)
		if err != nil {
			t.Fatalf("%s: %v", tc.tmpl, err)
		}
		for range 2 { // the second time from the cache
			got, err := tt.Expand(tc.m)
			if got != tc.want || (err != nil) != tc.illegal {
				t.Errorf("%s with type %q: got %q, %v; want %q, illegal %v", tc.tmpl, tc.m.Type, got, err, tc.want, tc.illegal)
			}
			if err != nil && !errors.Is(err, errIllegalTopic) {
				t.Errorf("%v does not wrap errIllegalTopic", err)
			}
		}
	}
}

func TestTopicTemplateRejectsBadTemplates(t *testing.T) {
	for tmpl, want := range map[string]string{
		"":                                  "topic: empty",
		"a}b":                               "'}' without '{'",
		"a{type":                            "'{' without '}'",
		"a.{Type}":                          "unknown placeholder {Type}",
		"a.{}":                              "unknown placeholder {}",
		"a b.{type}":                        "character ' '",
		strings.Repeat("a", 249) + "{type}": "leaves no room",
		".":                                 `"." is reserved`,
	} {
		_, err := parseTopic(tmpl)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want an error containing %q", tmpl, err, want)
		}
	}
}

// TestClassifyRejectsOnlyWhatOneMessageCauses: only a message's size is
// Rejected (relay.on_refused may park the message); the topic, the
// credentials and the settings stay plain Permanent.
func TestClassifyRejectsOnlyWhatOneMessageCauses(t *testing.T) {
	for _, err := range []error{kerr.MessageTooLarge, fmt.Errorf("w: %w (%w)", kerr.MessageTooLarge, errOverBatchBytes), fmt.Errorf("w: %w", kerr.MessageTooLarge)} {
		if v := classify(err, false); !v.permanent || !v.rejected {
			t.Errorf("%v: %+v, want permanent and rejected", err, v)
		}
	}
	for _, err := range []error{kerr.TopicAuthorizationFailed, kerr.UnknownTopicOrPartition, kerr.RecordListTooLarge,
		kerr.InvalidRequiredAcks, kerr.SaslAuthenticationFailed, kerr.InvalidTimestamp} {
		if v := classify(err, false); !v.permanent || v.rejected {
			t.Errorf("%v: %+v, want permanent, not rejected", err, v)
		}
	}
}

func TestClassifyDecidesByErrorKindNotText(t *testing.T) {
	for _, tc := range []struct {
		name       string
		err        error
		autoCreate bool
		permanent  bool
	}{
		{"broker: message too large", kerr.MessageTooLarge, false, true},
		{"client: message over batch_bytes", fmt.Errorf("%w (uncompressed_bytes=9)", kerr.MessageTooLarge), false, true},
		{"wrapped code with broker message", fmt.Errorf("%w: %s", kerr.TopicAuthorizationFailed, "denied"), false, true},
		{"invalid topic", fmt.Errorf("x: %w", kerr.InvalidTopicException), false, true},
		{"cluster authorization", kerr.ClusterAuthorizationFailed, false, true},
		{"SASL failed", kerr.SaslAuthenticationFailed, false, true},
		{"SASL mechanism", kerr.UnsupportedSaslMechanism, false, true},
		{"unknown topic without auto-create", kerr.UnknownTopicOrPartition, false, true},
		{"unknown topic with auto-create", kerr.UnknownTopicOrPartition, true, false},
		{"record list too large", kerr.RecordListTooLarge, false, true},
		{"leader moved", kerr.NotLeaderForPartition, false, false},
		{"leader not available", kerr.LeaderNotAvailable, false, false},
		{"not enough replicas", kerr.NotEnoughReplicas, false, false},
		{"not enough replicas after append", kerr.NotEnoughReplicasAfterAppend, false, false},
		{"request timed out", kerr.RequestTimedOut, false, false},
		{"unknown server error", kerr.UnknownServerError, false, false},
		{"record timeout", fmt.Errorf("%w, last err: %w", kgo.ErrRecordTimeout, kerr.NotLeaderForPartition), false, false},
		{"connection refused", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, false, false},
		{"connection reset", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, false, false},
		{"unexpected EOF", io.ErrUnexpectedEOF, false, false},
		{"deadline", context.DeadlineExceeded, false, false},
		{"canceled", fmt.Errorf("x: %w", context.Canceled), false, false},
		{"text that looks permanent", errors.New("MESSAGE_TOO_LARGE: The request included a message larger than the max message size the server will accept"), false, false},
		{"unknown CA", &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}, false, true},
		{"wrong host", x509.HostnameError{Host: "kafka"}, false, true},
		{"client certificate refused", fmt.Errorf("remote error: %w", tls.AlertError(42)), false, true},
		{"TLS alert from the broker", &net.OpError{Op: "remote error", Err: errors.New("tls: certificate required")}, false, true},
		{"not TLS on the port", tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}, false, true},
	} {
		if v := classify(tc.err, tc.autoCreate); v.permanent != tc.permanent {
			t.Errorf("%s (%v): permanent %v, want %v", tc.name, tc.err, v.permanent, tc.permanent)
		} else if v.permanent && v.hint == "" {
			t.Errorf("%s: permanent without a hint", tc.name)
		}
	}
}

func TestRecordMapsKeyValueHeadersAndTime(t *testing.T) {
	g := sinktest.NewGen(40)
	m := g.NullKeyMessage()
	m.Headers = map[string]string{"type": "spoof", "b": "2", "a": "1"}
	m.Payload = nil
	r := record(m, "t")
	if string(r.Key) != m.ID {
		t.Errorf("key %q, want the id for a NULL key", r.Key)
	}
	if r.Value == nil || len(r.Value) != 0 {
		t.Errorf("value %#v, want empty and non-nil (nil is a tombstone)", r.Value)
	}
	var hs []string
	for _, h := range r.Headers {
		hs = append(hs, h.Key+"="+string(h.Value))
	}
	if got, want := strings.Join(hs, " "), "id="+m.ID+" type="+m.Type+" a=1 b=2"; got != want {
		t.Errorf("headers %q, want %q", got, want)
	}
	if !r.Timestamp.Equal(m.CommitTime) || r.Topic != "t" {
		t.Errorf("time %s topic %q", r.Timestamp, r.Topic)
	}
	m.Time = time.Date(2020, 5, 6, 7, 8, 9, 0, time.UTC) // columns.time mapped
	if r := record(m, "t"); !r.Timestamp.Equal(m.Time) {
		t.Errorf("time %s, want the time column's %s", r.Timestamp, m.Time)
	}
	m.Time, m.CommitTime = time.Time{}, time.Time{}
	if r := record(m, "t"); time.Since(r.Timestamp) > time.Minute {
		t.Errorf("a zero commit time gave timestamp %s, want now", r.Timestamp)
	}
}

// TestMessageOverBatchBytesIsRejectedBeforeSending: a message that alone
// is over batch_bytes (with key, headers and record overhead) fails the
// call before anything is handed to the producer, Rejected and naming it.
func TestMessageOverBatchBytesIsRejectedBeforeSending(t *testing.T) {
	g := sinktest.NewGen(41)
	tmpl, err := parseTopic("t")
	if err != nil {
		t.Fatal(err)
	}
	s := &Sink{batchBytes: 16 << 10, topic: tmpl}
	small := g.SizedMessage("k", 1000)
	big := g.SizedMessage("k", 20<<10)
	_, err = s.records([]*message.Message{small, big})
	if !publish.IsRejected(err) || !strings.Contains(err.Error(), big.ID) || !errors.Is(err, kerr.MessageTooLarge) {
		t.Fatalf("a message over batch_bytes gave %v, want a Rejected MessageTooLarge naming %s", err, big.ID)
	}
	if recs, err := s.records([]*message.Message{small}); err != nil || len(recs) != 1 {
		t.Fatalf("a message under batch_bytes: %v", err)
	}
}

// TestAckedIsAPrefixPerTopic: Partial reports a record acknowledged only
// when no earlier record of the call to its topic failed, so that what
// the relay confirms is a prefix of each partition's share.
func TestAckedIsAPrefixPerTopic(t *testing.T) {
	recs := []kgo.Record{{Topic: "a"}, {Topic: "b"}, {Topic: "a"}, {Topic: "b"}, {Topic: "a"}, {Topic: "c"}}
	boom := errors.New("boom")
	errs := []error{nil, nil, boom, nil, nil, boom}
	got := fmt.Sprint(acked(recs, errs))
	if want := fmt.Sprint([]bool{true, true, false, true, false, false}); got != want {
		t.Errorf("acked = %s, want %s", got, want)
	}
}

// TestInsecureSkipVerifyWarnsAtOpen: opening a sink that does not verify
// the brokers' certificates logs one warning that says what it risks;
// with verification on there is none.
func TestInsecureSkipVerifyWarnsAtOpen(t *testing.T) {
	open := func(tls string) []map[string]any {
		var buf bytes.Buffer
		doc := "name: events\nkind: kafka\nbrokers: [127.0.0.1:1]\ntopic: t\ntls: " + tls
		s, err := New(sinktest.SinkConfig(t, doc), zerolog.New(&buf))
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		s.Close()
		var lines []map[string]any
		for _, l := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
			var m map[string]any
			if err := json.Unmarshal(l, &m); err != nil {
				t.Fatalf("log line %q: %v", l, err)
			}
			lines = append(lines, m)
		}
		return lines
	}
	var warnings []string
	for _, l := range open("{enabled: true, insecure_skip_verify: true}") {
		if l["level"] == "warn" {
			warnings = append(warnings, fmt.Sprint(l["message"]))
		}
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "tls.insecure_skip_verify") ||
		!strings.Contains(warnings[0], "not verified") || !strings.Contains(warnings[0], "man-in-the-middle can read and alter messages") {
		t.Errorf("warnings %q, want one about tls.insecure_skip_verify and what it risks", warnings)
	}
	for _, l := range open("{enabled: true}") {
		if l["level"] == "warn" {
			t.Errorf("warning with certificate verification on: %v", l)
		}
	}
}

// TestEmptyKeysAndHeaderValuesAreEmptyNotNull: a key or header value
// that is "" goes out empty, never nil (nil is sent as null), in
// both formats.
func TestEmptyKeysAndHeaderValuesAreEmptyNotNull(t *testing.T) {
	m := sinktest.NewGen(43).Message("")
	m.Type = ""
	m.Headers = map[string]string{"empty": "", "n": "1"}
	env := envelope.Settings{Format: envelope.CloudEvents, Source: "/orders"}
	for _, r := range []kgo.Record{record(m, "t"), cloudEventsRecord(m, "t", &env)} {
		if r.Key == nil {
			t.Errorf("nil key for the ordering key %q", m.OrderingKey())
		}
		for _, h := range r.Headers {
			if h.Value == nil {
				t.Errorf("header %s is nil (sent as null), want empty", h.Key)
			}
		}
	}
}
