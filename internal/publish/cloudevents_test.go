package publish

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2/event"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish/envelope"
)

var ceEnv = envelope.Settings{Format: envelope.CloudEvents, Source: "/orders"}

// TestCloudEventLineFormat pins the line of format: cloudevents byte for
// byte: attributes first, walpost's extensions, the tracing extension,
// the headers as a JSON string, the payload last and compacted.
func TestCloudEventLineFormat(t *testing.T) {
	m := &message.Message{ID: "0190f5c2-6a8e-7cc0-9a4e-0e7d6c1b2a31", Type: "order.created", Key: "k\"1", HasKey: true,
		Payload: []byte("{\"a\":\n 1}"), PayloadJSON: true, Headers: map[string]string{"traceparent": "00-1-2-01", "a": "line\nbreak"},
		LSN: 0x16B3748, CommitLSN: 0x16B37A0, CommitTime: time.Date(2026, 12, 3, 10, 5, 49, 123456000, time.FixedZone("CET", 3600))}
	got := string(AppendCloudEventLine(nil, m, &ceEnv))
	want := `{"specversion":"1.0","id":"0190f5c2-6a8e-7cc0-9a4e-0e7d6c1b2a31","source":"/orders","type":"order.created",` +
		`"time":"2026-12-03T09:05:49.123456Z","datacontenttype":"application/json","partitionkey":"k\"1",` +
		`"walpostlsn":"0/16B3748","walpostcommitlsn":"0/16B37A0","traceparent":"00-1-2-01",` +
		`"walpostheaders":"{\"a\":\"line\\nbreak\",\"traceparent\":\"00-1-2-01\"}","data":{"a":1}}` + "\n"
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	bare := &message.Message{ID: "x", Type: "t", LSN: 1, CommitLSN: 2}
	want = `{"specversion":"1.0","id":"x","source":"/orders","type":"t","datacontenttype":"application/octet-stream",` +
		`"walpostlsn":"0/1","walpostcommitlsn":"0/2"}` + "\n"
	if got := string(AppendCloudEventLine(nil, bare, &ceEnv)); got != want {
		t.Fatalf("a message with no key, time, headers or payload:\ngot  %s\nwant %s", got, want)
	}
}

// TestCloudEventLinesDecodeWithTheSDK unmarshals each line with the
// CloudEvents Go SDK (json.Unmarshal into event.Event, which validates it)
// and checks id, source, type, time (the commit time), datacontenttype,
// data (JSON, and bytes as data_base64), and the extensions.
func TestCloudEventLinesDecodeWithTheSDK(t *testing.T) {
	commit := time.Date(2026, 12, 3, 9, 5, 49, 123456000, time.UTC)
	for _, m := range []*message.Message{
		{ID: "a", Type: "order.created", Key: "k", HasKey: true, Payload: []byte(`{"n":[1,2]}`), PayloadJSON: true, CommitTime: commit,
			Headers: map[string]string{"tracestate": "x=1", "correlation_id": "c"}, LSN: 10, CommitLSN: 20},
		{ID: "b", Type: "t", Payload: []byte{0, 0xff, '{', '\n'}, CommitTime: commit, LSN: 30, CommitLSN: 40},
		{ID: "c", Type: "t", Payload: []byte("\"text\""), PayloadJSON: true, LSN: 50, CommitLSN: 60},
		{ID: "d", Type: "t", Payload: []byte{}, LSN: 70, CommitLSN: 80},
	} {
		line := AppendCloudEventLine(nil, m, &ceEnv)
		var e cloudevents.Event
		if err := json.Unmarshal(line, &e); err != nil {
			t.Fatalf("message %s: the SDK refuses %s: %v", m.ID, line, err)
		}
		if err := e.Validate(); err != nil {
			t.Fatalf("message %s: %v", m.ID, err)
		}
		wantCT := envelope.ContentType(m)
		switch {
		case e.ID() != m.ID, e.Source() != "/orders", e.Type() != m.Type, e.SpecVersion() != "1.0":
			t.Errorf("message %s: id %q source %q type %q specversion %q", m.ID, e.ID(), e.Source(), e.Type(), e.SpecVersion())
		case !e.Time().Equal(m.CommitTime):
			t.Errorf("message %s: time %s, want %s", m.ID, e.Time(), m.CommitTime)
		case e.DataContentType() != wantCT:
			t.Errorf("message %s: datacontenttype %q, want %q", m.ID, e.DataContentType(), wantCT)
		case !bytes.Equal(e.Data(), m.Payload) && !(len(m.Payload) == 0 && e.Data() == nil):
			t.Errorf("message %s: data %q, want %q", m.ID, e.Data(), m.Payload)
		case e.DataBase64 == m.PayloadJSON && len(m.Payload) > 0:
			t.Errorf("message %s: data_base64 %v for PayloadJSON %v", m.ID, e.DataBase64, m.PayloadJSON)
		}
		ext := e.Extensions()
		if ext[ExtLSN] != m.LSN.String() || ext[ExtCommitLSN] != m.CommitLSN.String() {
			t.Errorf("message %s: extensions %v lack the LSNs", m.ID, ext)
		}
		if pk, ok := ext[ExtPartitionKey]; ok != m.HasKey || ok && pk != m.Key {
			t.Errorf("message %s: partitionkey %v, want %q only for a key", m.ID, pk, m.Key)
		}
		if len(m.Headers) > 0 {
			var hs map[string]string
			if err := json.Unmarshal([]byte(ext[ExtHeaders].(string)), &hs); err != nil || len(hs) != len(m.Headers) || hs["correlation_id"] != "c" {
				t.Errorf("message %s: walpostheaders %v (%v), want %v", m.ID, ext[ExtHeaders], err, m.Headers)
			}
			if ext["tracestate"] != "x=1" {
				t.Errorf("message %s: tracestate extension %v", m.ID, ext["tracestate"])
			}
		} else if _, ok := ext[ExtHeaders]; ok {
			t.Errorf("message %s: walpostheaders without headers", m.ID)
		}
	}
}
