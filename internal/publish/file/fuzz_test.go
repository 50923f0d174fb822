package file

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
)

// FuzzFileTailRepair opens a file sink on arbitrary existing content. The
// open either refuses with ErrForeign, leaving the file byte for byte
// as it was, or keeps the content up to and including its last newline
// unchanged (it never cuts a complete line) and cuts only what follows;
// the first and last kept lines are JSON objects (lines in the middle are
// not read, by design); a Publish then appends whole, valid lines after
// the kept content, and opening the result again changes nothing.
//
// Seeds: testdata/fuzz/FuzzFileTailRepair.
func FuzzFileTailRepair(f *testing.F) {
	line := publish.AppendJSONLine(nil, msg("a", `{"n":1}`))
	f.Add([]byte{})
	f.Add(line)
	f.Add(append(bytes.Clone(line), line[:20]...))
	f.Add([]byte("id,type\n1,t\n"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, content []byte) {
		p := filepath.Join(dir, "out.jsonl")
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, content, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := Open("f", p, false)
		got, rerr := os.ReadFile(p)
		if rerr != nil {
			t.Fatal(rerr)
		}
		if err != nil {
			if !errors.Is(err, ErrForeign) {
				t.Fatalf("open failed with %v, want ErrForeign", err)
			}
			if !bytes.Equal(got, content) {
				t.Fatalf("refused (%v) but changed the file to %q", err, got)
			}
			return
		}
		defer s.Close()
		keep := bytes.LastIndexByte(content, '\n') + 1
		if !bytes.Equal(got, content[:keep]) {
			t.Fatalf("kept %q, want the content up to its last newline %q", got, content[:keep])
		}
		if keep > 0 {
			lines := bytes.Split(content[:keep-1], []byte("\n"))
			for _, l := range [][]byte{lines[0], lines[len(lines)-1]} {
				if !json.Valid(l) || l[0] != '{' {
					t.Fatalf("accepted a file whose first or last line is not a JSON object: %q", l)
				}
			}
		}

		if err := s.Publish(t.Context(), []*message.Message{msg("p1", `{"n":1}`), msg("p2", "[\n2]")}); err != nil {
			t.Fatal(err)
		}
		after, _ := os.ReadFile(p)
		if !bytes.HasPrefix(after, got) {
			t.Fatalf("Publish changed the kept content: %q", after)
		}
		added := bytes.Split(bytes.TrimSuffix(after[len(got):], []byte("\n")), []byte("\n"))
		if len(added) != 2 || !bytes.HasSuffix(after, []byte("\n")) {
			t.Fatalf("Publish appended %q, want two lines", after[len(got):])
		}
		for i, l := range added {
			var v struct{ ID string }
			if err := json.Unmarshal(l, &v); err != nil || v.ID != fmt.Sprintf("p%d", i+1) {
				t.Fatalf("appended line %d is %q (%v)", i+1, l, err)
			}
		}
		s.Close()

		again, err := Open("f", p, false)
		if err != nil {
			t.Fatalf("reopening what the sink wrote: %v", err)
		}
		again.Close()
		if b, _ := os.ReadFile(p); !bytes.Equal(b, after) {
			t.Fatalf("reopening changed the file from %q to %q", after, b)
		}
	})
}
