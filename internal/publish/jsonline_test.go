package publish

import (
	"encoding/json"
	"testing"

	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/internal/message"
)

func TestJSONLineFormat(t *testing.T) {
	m := &message.Message{ID: "0190f5c2-6a8e-7cc0-9a4e-0e7d6c1b2a31", Type: "order.created", Key: "k\"1", HasKey: true,
		Payload: []byte("{\"a\":\n 1}"), PayloadJSON: true, Headers: map[string]string{"z": "1", "a": "line\nbreak"},
		LSN: 0x16B3748, CommitLSN: 0x16B37A0}
	got := string(AppendJSONLine(nil, m))
	want := `{"id":"0190f5c2-6a8e-7cc0-9a4e-0e7d6c1b2a31","type":"order.created","key":"k\"1","payload":{"a":1},"headers":{"a":"line\nbreak","z":"1"},"lsn":"0/16B3748","commit_lsn":"0/16B37A0"}` + "\n"
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	m = &message.Message{ID: "x", Type: "t", Payload: []byte{0, 0xff}, LSN: 1, CommitLSN: 2}
	var v map[string]any
	if err := json.Unmarshal(AppendJSONLine(nil, m), &v); err != nil {
		t.Fatal(err)
	}
	if v["key"] != nil || v["payload"] != "AP8=" || v["payload_encoding"] != "base64" {
		t.Fatalf("got %v", v)
	}
}

func TestAppendLSNWritesWhatLSNStringWrites(t *testing.T) {
	for _, v := range []uint64{0, 1, 0xf, 0x10, 0x16B3748, 0xffffffff, 0x1_00000000, 0x16_B374D848, ^uint64(0)} {
		if got, want := string(appendLSN(nil, v)), pglogrepl.LSN(v).String(); got != want {
			t.Errorf("appendLSN(%#x) = %q, want %q", v, got, want)
		}
	}
}
