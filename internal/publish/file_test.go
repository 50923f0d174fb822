package publish

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/walpost/walpost/internal/decoder"
)

func msg(id string, payload string) *decoder.Message {
	return &decoder.Message{ID: id, Type: "t", Payload: []byte(payload), PayloadJSON: true, LSN: 0x16B3748, CommitLSN: 0x16B37A0}
}

func TestJSONLineFormat(t *testing.T) {
	m := &decoder.Message{ID: "0190f5c2-6a8e-7cc0-9a4e-0e7d6c1b2a31", Type: "order.created", Key: "k\"1", HasKey: true,
		Payload: []byte("{\"a\":\n 1}"), PayloadJSON: true, Headers: map[string]string{"z": "1", "a": "line\nbreak"},
		LSN: 0x16B3748, CommitLSN: 0x16B37A0}
	got := string(AppendJSONLine(nil, m))
	want := `{"id":"0190f5c2-6a8e-7cc0-9a4e-0e7d6c1b2a31","type":"order.created","key":"k\"1","payload":{"a":1},"headers":{"a":"line\nbreak","z":"1"},"lsn":"0/16B3748","commit_lsn":"0/16B37A0"}` + "\n"
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	m = &decoder.Message{ID: "x", Type: "t", Payload: []byte{0, 0xff}, LSN: 1, CommitLSN: 2}
	var v map[string]any
	if err := json.Unmarshal(AppendJSONLine(nil, m), &v); err != nil {
		t.Fatal(err)
	}
	if v["key"] != nil || v["payload"] != "AP8=" || v["payload_encoding"] != "base64" {
		t.Fatalf("got %v", v)
	}
}

func TestFileSinkCutsATornLastLineOnOpen(t *testing.T) {
	p := filepath.Join(t.TempDir(), "sub", "out.jsonl")
	s, err := OpenFileSink("f", p, true)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Publish(ctx, []*decoder.Message{msg("a", `{"n":1}`), msg("b", `{"n":2}`)}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	// A crash in the middle of a write leaves half a line.
	f, _ := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"id":"c","type":"t","pay`)
	f.Close()
	s, err = OpenFileSink("f", p, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Publish(ctx, []*decoder.Message{msg("c", `{"n":3}`)}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	b, _ := os.ReadFile(p)
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("got %d lines: %q", len(lines), b)
	}
	for i, l := range lines {
		var v map[string]any
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatalf("line %d not JSON: %q", i, l)
		}
		if v["id"] != string(rune('a'+i)) {
			t.Fatalf("line %d id %v", i, v["id"])
		}
	}
}

func TestFileSinkWithoutNewlineAtAllIsEmptied(t *testing.T) {
	p := filepath.Join(t.TempDir(), "out.jsonl")
	os.WriteFile(p, []byte(`{"id":"torn`), 0o644)
	s, err := OpenFileSink("f", p, false)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if b, _ := os.ReadFile(p); len(b) != 0 {
		t.Fatalf("file holds %q, want empty", b)
	}
}
