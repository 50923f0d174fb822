package decoder

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/pgwiretest"
)

func messagesDecoder() *Decoder {
	d := newDecoder()
	d.AcceptMessages("walpost")
	return d
}

// TestDecodeEnvelopeIsTheMessageItCarries: inside a transaction, a
// transactional message with the prefix is a Row with the envelope's
// fields, its own LSN and its transaction's commit; the payload is
// published byte for byte as written (spaces, key order, escapes), and
// payload_base64 carries bytes.
func TestDecodeEnvelopeIsTheMessageItCarries(t *testing.T) {
	commit := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	d := messagesDecoder()
	mustDecode(t, d, 1, pgwiretest.Begin(0x90, commit, 1))
	payload := `{ "z": 1,  "a": "\u00e9<&>", "n": [1.50, null] }`
	ev := mustDecode(t, d, 0x50, pgwiretest.Message(0x50, true, "walpost",
		`{"v":1,"id":"`+id1+`","type":"order.placed","key":"k1","headers":{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","tenant":"é"},"payload":`+payload+`}`))
	want := &message.Message{ID: id1, Type: "order.placed", Key: "k1", HasKey: true, Payload: []byte(payload), PayloadJSON: true,
		Headers: map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tenant": "é"},
		LSN:     0x50, CommitLSN: 0x90, CommitTime: commit}
	if ev.Kind != Row || ev.LSN != 0x50 || ev.CommitLSN != 0x90 || !reflect.DeepEqual(ev.Msg, want) {
		t.Fatalf("got %v %+v\nwant %+v", ev.Kind, ev.Msg, want)
	}
	for content, check := range map[string]func(*message.Message) bool{
		// No v, no key, no headers; a payload that is a JSON string.
		`{"id":"` + id1 + `","type":"t","payload":"text"}`: func(m *message.Message) bool {
			return !m.HasKey && m.Headers == nil && string(m.Payload) == `"text"` && m.PayloadJSON
		},
		// null key and headers; a JSON null payload.
		`{"id":"` + id1 + `","type":"t","key":null,"headers":null,"payload":null}`: func(m *message.Message) bool {
			return !m.HasKey && m.Headers == nil && string(m.Payload) == "null" && m.PayloadJSON
		},
		// An empty key is a key.
		`{"id":"` + id1 + `","type":"t","key":"","payload":1}`: func(m *message.Message) bool { return m.HasKey && m.Key == "" },
		// Bytes that are not JSON, and bytes that are.
		`{"id":"` + id1 + `","type":"t","payload_base64":"AP/+"}`: func(m *message.Message) bool {
			return string(m.Payload) == "\x00\xff\xfe" && !m.PayloadJSON
		},
		`{"id":"` + id1 + `","type":"t","payload_base64":"eyJhIjoxfQ=="}`: func(m *message.Message) bool {
			return string(m.Payload) == `{"a":1}` && m.PayloadJSON
		},
	} {
		ev := mustDecode(t, d, 0x60, pgwiretest.Message(0x60, true, "walpost", content))
		if ev.Kind != Row || ev.Msg.ID != id1 || !check(ev.Msg) {
			t.Errorf("%s: got %+v", content, ev.Msg)
		}
	}
	if ev := mustDecode(t, d, 0x70, pgwiretest.Commit(0x90, 0xA0, commit)); ev.Kind != Commit || ev.LSN != 0xA0 {
		t.Fatalf("commit: %+v", ev)
	}
}

// TestDecodeMessagesSourceIgnoresTableRowsAndOtherPrefixes: with a
// table-less outbox, an INSERT into the outbox table, another prefix, an
// adopt message and the heartbeat are not messages; the heartbeat stays
// a Progress point.
func TestDecodeMessagesSourceIgnoresTableRowsAndOtherPrefixes(t *testing.T) {
	commit := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	d := messagesDecoder()
	d.AcceptAdopted(AdoptPrefix("walpost_outbox")) // ignored too
	env := `{"id":"` + id1 + `","type":"t","payload":{}}`
	mustDecode(t, d, 1, pgwiretest.Relation(16384, "public", "outbox", outboxCols...))
	mustDecode(t, d, 2, pgwiretest.Begin(0x90, commit, 1))
	for _, b := range [][]byte{
		pgwiretest.Insert(16384, s(id1), s("t"), nil, s(`{}`), nil, nil),
		pgwiretest.Insert(99, s("not even a known relation")),
		pgwiretest.Message(0x40, true, "walpost2", env),
		pgwiretest.Message(0x41, true, "walpos", env),
		pgwiretest.Message(0x42, true, "walpost.adopt.walpost_outbox", `{"v":1}`),
	} {
		if ev := mustDecode(t, d, 3, b); ev.Kind != Skip {
			t.Fatalf("%q: kind %v, want Skip", b, ev.Kind)
		}
	}
	mustDecode(t, d, 4, pgwiretest.Commit(0x90, 0xA0, commit))
	if ev := mustDecode(t, d, 0xB0, pgwiretest.Message(0xB0, false, HeartbeatPrefix, "")); ev.Kind != Progress || ev.LSN != 0xB0 {
		t.Fatalf("heartbeat: %+v", ev)
	}
}

// TestDecodeBadEnvelopeIsAnInvalidRow: every way an envelope can be wrong
// is an *Error (relay.on_invalid and cdc skip apply), never a protocol
// error, naming the LSN, the id when readable, and what is wrong; its Row
// keeps the envelope as sent. A non-transactional message with the prefix
// is one too.
func TestDecodeBadEnvelopeIsAnInvalidRow(t *testing.T) {
	commit := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	const ok = `"type":"t","payload":{}`
	for _, c := range []struct{ content, id, want string }{
		{`not json`, "", "not a JSON object"},
		{`[1,2]`, "", "not a JSON object"},
		{`null`, "", "not a JSON object"},
		{``, "", "not a JSON object"},
		{`{"id":"` + id1 + `",` + ok + `} {}`, "", "not a JSON object"},
		{"{\"id\":\"" + id1 + "\",\"type\":\"t\xff\",\"payload\":{}}", "", "not valid UTF-8 (byte 0xff at offset 54)"},
		{`{"id":"` + id1 + `",` + ok + `,"extra":1}`, id1, `unknown field "extra"`},
		{`{"id":"` + id1 + `",` + ok + `,"type":"u"}`, id1, `the field "type" twice`},
		{`{"v":2,"id":"` + id1 + `",` + ok + `}`, id1, "version v is \"2\""},
		{`{` + ok + `}`, "", "id is missing or empty"},
		{`{"id":7,` + ok + `}`, "", "id is \"7\", not a string"},
		{`{"id":"order-7",` + ok + `}`, "order-7", `id "order-7" is not a UUID`},
		{`{"id":"{` + id1 + `}",` + ok + `}`, "{" + id1 + "}", "is not a UUID"},
		{`{"id":"` + id1 + `","payload":{}}`, id1, "type is missing or empty"},
		{`{"id":"` + id1 + `","type":"","payload":{}}`, id1, "type is missing or empty"},
		{`{"id":"` + id1 + `","type":"t\ud800","payload":{}}`, id1, "type: \\ud800 at offset 2 is an unpaired UTF-16 surrogate"},
		{`{"id":"` + id1 + `","type":"t","key":5,"payload":{}}`, id1, `key is "5", not a string`},
		{`{"id":"` + id1 + `",` + ok + `,"headers":{"a":1}}`, id1, "headers is not a JSON object of strings"},
		{`{"id":"` + id1 + `",` + ok + `,"headers":["a"]}`, id1, "headers is not a JSON object of strings"},
		{`{"id":"` + id1 + `",` + ok + `,"headers":{"a":"\udc00"}}`, id1, "headers: \\udc00"},
		{`{"id":"` + id1 + `","type":"t"}`, id1, "payload is missing"},
		{`{"id":"` + id1 + `",` + ok + `,"payload_base64":"AA=="}`, id1, "both payload and payload_base64"},
		{`{"id":"` + id1 + `","type":"t","payload_base64":"not base64!"}`, id1, "payload_base64 is not standard base64"},
		{`{"id":"` + id1 + `","type":"t","payload_base64":{}}`, id1, "payload_base64 is \"{}\", not a string"},
	} {
		d := messagesDecoder()
		mustDecode(t, d, 1, pgwiretest.Begin(0x90, commit, 1))
		_, err := d.Decode(0x50, pgwiretest.Message(0x50, true, "walpost", c.content))
		var de *Error
		if !errors.As(err, &de) || errors.Is(err, ErrProtocol) || de.Table {
			t.Errorf("%s: %v, want an invalid row", c.content, err)
			continue
		}
		if de.LSN != 0x50 || de.CommitLSN != 0x90 || de.ID != c.id || de.Row["envelope"] != c.content ||
			!strings.Contains(err.Error(), "at LSN 0/50") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %+v: %v, want id %q and %q", c.content, de, err, c.id, c.want)
		}
	}

	d := messagesDecoder()
	_, err := d.Decode(0x50, pgwiretest.Message(0x50, false, "walpost", `{"id":"`+id1+`",`+ok+`}`))
	var de *Error
	if !errors.As(err, &de) || de.ID != id1 || de.CommitLSN != 0 || !strings.Contains(err.Error(), "non-transactional") {
		t.Fatalf("non-transactional message with the prefix: %v", err)
	}
	// A transactional message outside a transaction is not pgoutput.
	if _, err := d.Decode(0x60, pgwiretest.Message(0x60, true, "walpost", `{}`)); !errors.Is(err, ErrProtocol) {
		t.Fatalf("transactional message outside a transaction: %v", err)
	}
}

// FuzzDecodeEnvelope: no content makes the decoder panic; what it returns
// is a Row whose id is a UUID and whose text is valid UTF-8, or an invalid
// row whose error is valid UTF-8 and whose Row keeps the content.
func FuzzDecodeEnvelope(f *testing.F) {
	f.Add(`{"v":1,"id":"` + id1 + `","type":"t","key":"k","headers":{"a":"b"},"payload":{"x":[1,2]}}`)
	f.Add(`{"id":"` + id1 + `","type":"t","payload_base64":"AP8="}`)
	f.Add(`{"id":"` + id1 + `","type":"t\ud800","payload":1,"id":2}`)
	f.Add("{\"id\":\"\xff\"}")
	f.Fuzz(func(t *testing.T, content string) {
		d := messagesDecoder()
		mustDecode(t, d, 1, pgwiretest.Begin(0x90, time.Unix(0, 0), 1))
		ev, err := d.Decode(0x50, pgwiretest.Message(0x50, true, "walpost", content))
		var de *Error
		switch {
		case err == nil:
			m := ev.Msg
			if ev.Kind != Row || len(m.ID) != 36 || m.Type == "" || !utf8.ValidString(m.ID+m.Type+m.Key) {
				t.Fatalf("%q: %+v", content, m)
			}
			for k, v := range m.Headers {
				if !utf8.ValidString(k + v) {
					t.Fatalf("%q: header %q: %q", content, k, v)
				}
			}
		case !errors.As(err, &de) || errors.Is(err, ErrProtocol):
			t.Fatalf("%q: %v, want an invalid row", content, err)
		case !utf8.ValidString(err.Error()) || !utf8.ValidString(de.ID) || de.Row["envelope"] != content:
			t.Fatalf("%q: %v", content, err)
		}
	})
}
