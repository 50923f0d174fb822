package replay

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
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
