package file

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
)

// largeMessages are messages whose payloads the file sink writes from the
// message rather than from a line it built (verbatim and base64), one it
// compacts into the line, and small ones between them.
func largeMessages() []*message.Message {
	big := `{"pad":"` + strings.Repeat("é", publish.OutOfLineMin) + `"}`
	binary := bytes.Repeat([]byte{0xab, 0, 0xff}, publish.OutOfLineMin/2+1) // not UTF-8: base64
	multiline := "{\n  \"pad\": \"" + strings.Repeat("x", publish.OutOfLineMin) + "\"\n}"
	ms := []*message.Message{msg("a", `{"n":1}`), msg("big", big), msg("b", `2`),
		{ID: "bin", Type: "t", Payload: binary, HasKey: true, Key: "k"}, msg("lines", multiline), msg("big2", big)}
	ms[len(ms)-1].Headers = map[string]string{"h": "v"}
	return ms
}

// TestFileSinkWritesLargePayloadsFromTheMessageAsTheLineFormatSays: a
// batch with large payloads is written exactly as AppendJSONLine makes
// its lines, to a file and to stdout's writer.
func TestFileSinkWritesLargePayloadsFromTheMessageAsTheLineFormatSays(t *testing.T) {
	msgs := largeMessages()
	var want []byte
	for _, m := range msgs {
		want = publish.AppendJSONLine(want, m)
	}
	p := filepath.Join(t.TempDir(), "out.jsonl")
	s, err := Open("f", p, true)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var writes int
	s.testWrite = func(b []byte) (int, error) { writes++; return s.f.Write(b) }
	if err := s.Publish(context.Background(), msgs); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the file (%d bytes) differs from AppendJSONLine's lines (%d bytes)", len(got), len(want))
	}
	if writes < 4 {
		t.Fatalf("%d writes: the large payloads were copied into the lines", writes)
	}
	if got := fileIDs(t, p); got != "a,big,b,bin,lines,big2" {
		t.Fatalf("file holds %s", got)
	}
	if len(s.lines.outs) != 0 || cap(s.lines.buf) > 4<<20 {
		t.Fatalf("the sink keeps %d payloads after the write", len(s.lines.outs))
	}

	var out bytes.Buffer
	if err := NewWriterSink("w", &out).Publish(context.Background(), msgs); err != nil || !bytes.Equal(out.Bytes(), want) {
		t.Fatalf("stdout sink: %v; %d bytes, want %d", err, out.Len(), len(want))
	}
}

// TestFileSinkFailedWriteOfALargePayloadIsCutBack: a write that fails in
// the middle of a large payload leaves the file as it was, and the retry
// appends the whole batch.
func TestFileSinkFailedWriteOfALargePayloadIsCutBack(t *testing.T) {
	p := filepath.Join(t.TempDir(), "out.jsonl")
	s, err := Open("f", p, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	filePublish(t, s, "a")
	msgs := largeMessages()
	for fail := 1; fail <= 6; fail++ {
		writes := 0
		s.testWrite = func(b []byte) (int, error) {
			if writes++; writes == fail {
				n, _ := s.f.Write(b[:len(b)/2])
				return n, unix.ENOSPC
			}
			return s.f.Write(b)
		}
		if err := s.Publish(context.Background(), msgs); err == nil {
			t.Fatalf("failing write %d: no error", fail)
		}
		if got := fileIDs(t, p); got != "a" {
			t.Fatalf("after failing write %d the file holds %s, want a", fail, got)
		}
	}
	s.testWrite = nil
	if err := s.Publish(context.Background(), msgs); err != nil {
		t.Fatal(err)
	}
	if got := fileIDs(t, p); got != "a,a,big,b,bin,lines,big2" {
		t.Fatalf("file holds %s", got)
	}
}
