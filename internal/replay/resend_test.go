package replay

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/store"
)

// TestMessageOfLineGivesBackTheParkedMessage: a message written as the
// dead-letter table keeps a refused one (publish.AppendJSONLine) reads
// back as the same message, so that resend publishes the same id and
// bytes: JSON and non-JSON (base64) payloads, NULL and empty keys,
// headers, positions.
func TestMessageOfLineGivesBackTheParkedMessage(t *testing.T) {
	for _, m := range []*message.Message{
		{ID: "0190d1a2-0000-7000-8000-000000000001", Type: "order.created", Key: "k1", HasKey: true,
			Payload: []byte(`{"a": "x", "b": [1, 2]}`), PayloadJSON: true, Headers: map[string]string{"traceparent": "t", "x": "é\n"},
			LSN: pglogrepl.LSN(0x16B3748), CommitLSN: pglogrepl.LSN(0x16B37A0)},
		{ID: "0190d1a2-0000-7000-8000-000000000002", Type: "bin", Payload: []byte{0, 1, 0xff, '{'}},
		{ID: "0190d1a2-0000-7000-8000-000000000003", Type: "t", HasKey: true, Payload: []byte(`"s"`), PayloadJSON: true},
	} {
		line := bytes.TrimSuffix(publish.AppendJSONLine(nil, m), []byte("\n"))
		got, err := MessageOfLine(line)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Errorf("%s:\n got %+v\nwant %+v", line, got, m)
		}
		if again := publish.AppendJSONLine(nil, got); !bytes.Equal(again, append(line, '\n')) {
			t.Errorf("written again as %s, want %s", again, line)
		}
	}
	if _, err := MessageOfLine([]byte(`{"n": 1}`)); err == nil {
		t.Error("a row of column values read as a message line")
	}
}

// TestParkedLineKeepsDeliverAtAndExpiresAt: the dead-letter table's record
// of a refused message (store.MessageLine) carries its deliver_at and
// expires_at, which MessageOfLine restores, so that a resend schedules it
// and gives it the time to live it has left; a record without them (the
// file sink's line, or one parked by an older walpost) reads with neither.
func TestParkedLineKeepsDeliverAtAndExpiresAt(t *testing.T) {
	at := time.Date(2026, 12, 6, 7, 0, 0, 123456789, time.FixedZone("x", 3600))
	m := &message.Message{ID: "0190d1a2-0000-7000-8000-000000000004", Type: "t", Payload: []byte(`{}`), PayloadJSON: true,
		DeliverAt: at, ExpiresAt: at.Add(time.Hour)}
	line := store.MessageLine(m)
	if !bytes.Contains(line, []byte(`"deliver_at":"2026-12-06T06:00:00.123456789Z"`)) || !bytes.Contains(line, []byte(`"expires_at":"2026-12-06T07:00:00.123456789Z"`)) {
		t.Fatalf("record %s lacks deliver_at or expires_at in UTC", line)
	}
	got, err := MessageOfLine(line)
	if err != nil {
		t.Fatal(err)
	}
	if !got.DeliverAt.Equal(m.DeliverAt) || !got.ExpiresAt.Equal(m.ExpiresAt) {
		t.Fatalf("read back deliver_at %s, expires_at %s; want %s, %s", got.DeliverAt, got.ExpiresAt, m.DeliverAt, m.ExpiresAt)
	}
	only := *m
	only.ExpiresAt = time.Time{}
	if got, err := MessageOfLine(store.MessageLine(&only)); err != nil || !got.DeliverAt.Equal(at) || !got.ExpiresAt.IsZero() {
		t.Fatalf("deliver_at alone read back as %+v, %v", got, err)
	}
	plain := *m
	plain.DeliverAt, plain.ExpiresAt = time.Time{}, time.Time{}
	if l := store.MessageLine(&plain); !bytes.Equal(l, bytes.TrimSuffix(publish.AppendJSONLine(nil, &plain), []byte("\n"))) {
		t.Fatalf("a message with neither is not parked as the file sink writes it: %s", l)
	}
}

// TestResendAppliesOnExpired: a parked message expired by the time it is
// resent is not resent under relay.on_expired: drop (ErrExpired, naming
// the way out), and goes without its expiry under send and dead_letter;
// one not expired keeps both times.
func TestResendAppliesOnExpired(t *testing.T) {
	now := time.Now()
	p := &store.Parked{ID: "m1"}
	expired := &message.Message{ID: "m1", DeliverAt: now.Add(-time.Hour), ExpiresAt: now.Add(-time.Minute)}
	if _, err := unlessExpired(expired, config.ExpiredDrop, now, p); !errors.Is(err, ErrExpired) || !strings.Contains(err.Error(), "cdc dead-letter drop m1") {
		t.Fatalf("drop: %v, want ErrExpired saying how to drop it", err)
	}
	for _, policy := range []config.ExpiredPolicy{config.ExpiredSend, config.ExpiredDeadLetter} {
		got, err := unlessExpired(expired, policy, now, p)
		if err != nil || !got.ExpiresAt.IsZero() || !got.DeliverAt.Equal(expired.DeliverAt) || expired.ExpiresAt.IsZero() {
			t.Fatalf("%s: %+v, %v; want it without its expiry (the parked one unchanged)", policy, got, err)
		}
	}
	live := &message.Message{ID: "m2", DeliverAt: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}
	if got, err := unlessExpired(live, config.ExpiredDrop, now, p); err != nil || got != live {
		t.Fatalf("a message not expired: %+v, %v", got, err)
	}
}

// TestParkedTextTakesAFixWrittenAsJSON: an operator's fix of a json or
// jsonb column may write the value as JSON; it is taken as its text, a
// string as the string, {"base64": ...} as its bytes.
func TestParkedTextTakesAFixWrittenAsJSON(t *testing.T) {
	vals := map[string]json.RawMessage{"payload": json.RawMessage(`{"a": 1}`), "s": json.RawMessage(`"{\"a\": 1}"`),
		"b": json.RawMessage(`{"base64": "aGk="}`)}
	for name, want := range map[string]string{"payload": `{"a": 1}`, "s": `{"a": 1}`, "b": "hi"} {
		if got, err := parkedText(vals, name); err != nil || got == nil || *got != want {
			t.Errorf("parkedText(%s) = %v, %v; want %q", name, got, err, want)
		}
	}
}
