package file

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.yaml.in/yaml/v3"
	"golang.org/x/sys/unix"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
)

func msg(id string, payload string) *message.Message {
	return &message.Message{ID: id, Type: "t", Payload: []byte(payload), PayloadJSON: true, LSN: 0x16B3748, CommitLSN: 0x16B37A0}
}

func TestFileSinkCutsATornLastLineOnOpen(t *testing.T) {
	p := filepath.Join(t.TempDir(), "sub", "out.jsonl")
	s, err := Open("f", p, true)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Publish(ctx, []*message.Message{msg("a", `{"n":1}`), msg("b", `{"n":2}`)}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	// A crash in the middle of a write leaves half a line.
	appendBehind(t, p, []byte(`{"id":"c","type":"t","pay`))
	s, err = Open("f", p, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Publish(ctx, []*message.Message{msg("c", `{"n":3}`)}); err != nil {
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
	s, err := Open("f", p, false)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if b, _ := os.ReadFile(p); len(b) != 0 {
		t.Fatalf("file holds %q, want empty", b)
	}
}

// fileLines reads path and returns its lines, failing unless it ends in a
// newline (or is empty) and every line is a JSON object.
func fileLines(t testing.TB, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) == 0 {
		return nil
	}
	if b[len(b)-1] != '\n' {
		t.Fatalf("%s does not end in a newline: %q", path, b)
	}
	var out []map[string]any
	for i, l := range strings.Split(string(b[:len(b)-1]), "\n") {
		var v map[string]any
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatalf("line %d of %s is not a JSON object: %q", i+1, path, l)
		}
		out = append(out, v)
	}
	return out
}

// fileIDs returns the ids of path's lines.
func fileIDs(t testing.TB, path string) string {
	t.Helper()
	var ids []string
	for _, v := range fileLines(t, path) {
		ids = append(ids, fmt.Sprint(v["id"]))
	}
	return strings.Join(ids, ",")
}

func filePublish(t testing.TB, s *Sink, ids ...string) {
	t.Helper()
	var msgs []*message.Message
	for _, id := range ids {
		msgs = append(msgs, msg(id, `{"n":1}`))
	}
	if err := s.Publish(context.Background(), msgs); err != nil {
		t.Fatal(err)
	}
}

// fileLogBuffer is a log destination safe for concurrent use.
type fileLogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *fileLogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *fileLogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// fileWaitFor polls cond until it holds or d passes.
func fileWaitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// fileSinkConfig parses one sink's YAML.
func fileSinkConfig(t testing.TB, doc string) *config.Sink {
	t.Helper()
	var s config.Sink
	if err := yaml.Unmarshal([]byte(doc), &s); err != nil {
		t.Fatalf("parsing sink config: %v\n%s", err, doc)
	}
	return &s
}

func TestFileSinkSecondOpenWaitsForTheLockThenAppendsAfterEverythingTheFirstWrote(t *testing.T) {
	p := filepath.Join(t.TempDir(), "out.jsonl")
	first, err := Open("f", p, false)
	if err != nil {
		t.Fatal(err)
	}
	filePublish(t, first, "a", "b")

	var logs fileLogBuffer
	type result struct {
		s   *Sink
		err error
	}
	done := make(chan result, 1)
	go func() {
		s, err := OpenContext(context.Background(), "f", p, Options{Log: zerolog.New(&logs)})
		done <- result{s, err}
	}()
	if !fileWaitFor(10*time.Second, func() bool { return strings.Contains(logs.String(), "locked by another process") }) {
		t.Fatalf("the second open did not report the lock; logs: %s", logs.String())
	}
	// The second sink has its descriptor open and waits; the first goes on
	// writing, as a relay does until it notices it lost the slot.
	filePublish(t, first, "c")
	select {
	case r := <-done:
		t.Fatalf("second open returned while the first holds the lock: %v", r.err)
	default:
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.s.Close()
	filePublish(t, r.s, "d")
	if got := fileIDs(t, p); got != "a,b,c,d" {
		t.Fatalf("file holds %s, want a,b,c,d", got)
	}
	if n := strings.Count(logs.String(), "locked by another process"); n != 1 {
		t.Fatalf("logged the wait %d times, want once", n)
	}
}

func TestFileSinkOpenGivesUpWhenCtxEndsWhileAnotherHoldsTheLock(t *testing.T) {
	p := filepath.Join(t.TempDir(), "out.jsonl")
	first, err := Open("f", p, false)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	filePublish(t, first, "a")
	// A torn tail that the waiting open must not cut.
	appendBehind(t, p, []byte(`{"id":"b","ty`))
	before, _ := os.ReadFile(p)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	_, err = OpenContext(ctx, "f", p, Options{})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), p) {
		t.Fatalf("err = %v, want the deadline, naming the path", err)
	}
	if after, _ := os.ReadFile(p); !bytes.Equal(before, after) {
		t.Fatalf("the file changed while not locked: %q", after)
	}
}

func TestFileSinkAppendsAtTheEndOfTheFileAsItIsAtEachWrite(t *testing.T) {
	p := filepath.Join(t.TempDir(), "out.jsonl")
	s, err := Open("f", p, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	filePublish(t, s, "a")
	// Lines that reach the file behind the sink's back (an older walpost
	// without the lock) are not overwritten.
	appendBehind(t, p, publish.AppendJSONLine(nil, msg("x", `1`)))
	filePublish(t, s, "b")
	if got := fileIDs(t, p); got != "a,x,b" {
		t.Fatalf("file holds %s, want a,x,b", got)
	}
}

func TestFileSinkCutsAZeroFilledTail(t *testing.T) {
	p := filepath.Join(t.TempDir(), "out.jsonl")
	content := append(publish.AppendJSONLine(nil, msg("a", `1`)), make([]byte, 4096)...)
	os.WriteFile(p, content, 0o600)
	s, err := Open("f", p, false)
	if err != nil {
		t.Fatal(err)
	}
	filePublish(t, s, "b")
	s.Close()
	if got := fileIDs(t, p); got != "a,b" {
		t.Fatalf("file holds %s, want a,b", got)
	}
}

func TestFileSinkReportsHowManyBytesItCut(t *testing.T) {
	p := filepath.Join(t.TempDir(), "out.jsonl")
	os.WriteFile(p, append(publish.AppendJSONLine(nil, msg("a", `1`)), `{"id":"b"`...), 0o600)
	var logs fileLogBuffer
	s, err := OpenContext(context.Background(), "f", p, Options{Log: zerolog.New(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if !strings.Contains(logs.String(), `"bytes":9`) || !strings.Contains(logs.String(), `"level":"warn"`) {
		t.Fatalf("logs: %s", logs.String())
	}
}

func TestFileSinkRefusesAForeignFileAndLeavesItUnchanged(t *testing.T) {
	line := string(publish.AppendJSONLine(nil, msg("a", `{"n":1}`)))
	cases := map[string]string{
		"csv":                     "id,type,payload\n1,t,x\n",
		"csv without newline":     "id,type,payload",
		"JSON array":              `[{"id":"a","lsn":"0/1","commit_lsn":"0/2"}]` + "\n",
		"JSON array one per line": "[\n" + line + "]\n",
		"binary":                  "\x7fELF\x02\x01\x01\x00\x00\n\x00\x00\x3e\x00",
		"other JSON lines":        `{"level":"info","msg":"hello"}` + "\n",
		"no lsn":                  `{"id":"a","type":"t"}` + "\n",
		"lsn not a string":        `{"id":"a","lsn":1,"commit_lsn":"0/2"}` + "\n",
		"empty first line":        "\n" + line,
		"two objects on a line":   strings.TrimSuffix(line, "\n") + line,
		"foreign last line":       line + line + "hello\n",
		"foreign tail":            line + "hello",
		"tail of another JSON":    line + `{"level":"info"`,
	}
	for name, content := range cases {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "out.jsonl")
			os.WriteFile(p, []byte(content), 0o644)
			s, err := Open("f", p, false)
			if err == nil {
				s.Close()
				t.Fatal("opened a foreign file")
			}
			if !errors.Is(err, ErrForeign) || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "move it away or point path: elsewhere") {
				t.Fatalf("err = %v", err)
			}
			if b, _ := os.ReadFile(p); string(b) != content {
				t.Fatalf("file changed to %q", b)
			}
		})
	}
}

func TestFileSinkOpensAFileWrittenByAnOlderWalpost(t *testing.T) {
	// Lines as walpost wrote them before the lock and the tail check.
	old := `{"id":"0190f5c2-6a8e-7cc0-9a4e-0e7d6c1b2a31","type":"order.created","key":"k\"1","payload":{"a":1},"headers":{"a":"line\nbreak","z":"1"},"lsn":"0/16B3748","commit_lsn":"0/16B37A0"}
{"id":"x","type":"t","key":null,"payload":"AP8=","payload_encoding":"base64","headers":{},"lsn":"0/1","commit_lsn":"0/2"}
{"id":"y","type":"t","key":"é","payload":[1,"\u2028"],"headers":{},"lsn":"1/0","commit_lsn":"1/10"}
`
	p := filepath.Join(t.TempDir(), "out.jsonl")
	os.WriteFile(p, []byte(old), 0o644)
	s, err := Open("f", p, true)
	if err != nil {
		t.Fatal(err)
	}
	filePublish(t, s, "z")
	s.Close()
	b, _ := os.ReadFile(p)
	if !strings.HasPrefix(string(b), old) {
		t.Fatalf("the old lines changed: %q", b)
	}
	if got := fileIDs(t, p); got != "0190f5c2-6a8e-7cc0-9a4e-0e7d6c1b2a31,x,y,z" {
		t.Fatalf("file holds %s", got)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o644 {
		t.Fatalf("an existing file's mode changed to %v", fi.Mode())
	}
}

func TestFileSinkRefusesASymlink(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real.jsonl")
	os.WriteFile(real, publish.AppendJSONLine(nil, msg("a", `1`)), 0o600)
	for name, target := range map[string]string{"to a file": real, "dangling": filepath.Join(dir, "nowhere.jsonl")} {
		t.Run(name, func(t *testing.T) {
			link := filepath.Join(t.TempDir(), "out.jsonl")
			if err := os.Symlink(target, link); err != nil {
				t.Fatal(err)
			}
			s, err := Open("f", link, false)
			if err == nil {
				s.Close()
				t.Fatal("opened a symlink")
			}
			if !strings.Contains(err.Error(), "is a symbolic link") || !strings.Contains(err.Error(), "real file") {
				t.Fatalf("err = %v", err)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "nowhere.jsonl")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("created the target of a dangling symlink")
	}
}

func TestFileSinkCreatesFile0600AndDirectories0700ByDefault(t *testing.T) {
	base := t.TempDir()
	p := filepath.Join(base, "a", "b", "out.jsonl")
	s, err := Open("f", p, true)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	for path, want := range map[string]os.FileMode{p: 0o600, filepath.Join(base, "a"): 0o700, filepath.Join(base, "a", "b"): 0o700} {
		if fi, _ := os.Stat(path); fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", path, fi.Mode().Perm(), want)
		}
	}
}

func TestFileSinkModeSettingSetsTheModeOfWhatItCreates(t *testing.T) {
	base := t.TempDir()
	p := filepath.Join(base, "d", "out.jsonl")
	open, err := publish.Prepare(0, fileSinkConfig(t, "name: out\nkind: file\npath: "+p+"\nmode: \"0660\"\nfsync: false\n"), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(base, "d")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("Prepare created the directory: a standby must not touch the sink")
	}
	s, err := open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	for path, want := range map[string]os.FileMode{p: 0o660, filepath.Join(base, "d"): 0o770} {
		if fi, _ := os.Stat(path); fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v (the umask must not narrow it)", path, fi.Mode().Perm(), want)
		}
	}
	// An unquoted YAML octal number works too.
	cfg := fileSinkConfig(t, "name: out\nkind: file\npath: "+filepath.Join(base, "e", "out.jsonl")+"\nmode: 0640\n")
	if s, err = publish.Open(context.Background(), 0, cfg, zerolog.Nop()); err != nil {
		t.Fatal(err)
	}
	s.Close()
	for path, want := range map[string]os.FileMode{filepath.Join(base, "e", "out.jsonl"): 0o640, filepath.Join(base, "e"): 0o750} {
		if fi, _ := os.Stat(path); fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", path, fi.Mode().Perm(), want)
		}
	}
}

func TestFileSinkModeSettingIsValidated(t *testing.T) {
	for mode, want := range map[string]string{
		`"abc"`:   `mode: "abc" is not an octal file mode like "0640"`,
		`"0890"`:  `mode: "0890" is not an octal file mode like "0640"`,
		`"-600"`:  `mode: "-600" is not an octal file mode like "0640"`,
		`"04755"`: `mode: "04755" is out of range 0..0777`,
		`"0400"`:  `mode: "0400" does not let the relay read and write the file`,
	} {
		_, err := publish.Prepare(2, fileSinkConfig(t, "name: out\nkind: file\npath: /nonexistent/out.jsonl\nmode: "+mode+"\n"), zerolog.Nop())
		if err == nil || !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "sinks[2] (out): mode: ") {
			t.Errorf("mode %s: err = %v, want %q", mode, err, want)
		}
	}
	for _, mode := range []string{"0600", "600", "0o640", "0777"} {
		if _, err := parseFileMode(mode); err != nil {
			t.Errorf("mode %q: %v", mode, err)
		}
	}
}

func TestFileSinkFailedWriteIsCutBackToWholeLines(t *testing.T) {
	p := filepath.Join(t.TempDir(), "out.jsonl")
	s, err := Open("f", p, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	filePublish(t, s, "a")
	// A write that gets half the batch out, then fails (disk full).
	s.testWrite = func(b []byte) (int, error) {
		n, _ := s.f.Write(b[:len(b)/2])
		return n, unix.ENOSPC
	}
	if err := s.Publish(context.Background(), []*message.Message{msg("b", `1`), msg("c", `2`)}); !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("err = %v", err)
	}
	if got := fileIDs(t, p); got != "a" {
		t.Fatalf("after the failed write the file holds %s, want a", got)
	}
	// A write that went out whole but whose fdatasync failed.
	s.testWrite = func(b []byte) (int, error) {
		n, _ := s.f.Write(b)
		return n, unix.EIO
	}
	if err := s.Publish(context.Background(), []*message.Message{msg("b", `1`)}); !errors.Is(err, unix.EIO) {
		t.Fatalf("err = %v", err)
	}
	if got := fileIDs(t, p); got != "a" {
		t.Fatalf("after the failed sync the file holds %s, want a", got)
	}
	s.testWrite = nil
	filePublish(t, s, "b", "c")
	if got := fileIDs(t, p); got != "a,b,c" {
		t.Fatalf("file holds %s, want a,b,c", got)
	}
}

func TestFileSinkFailedWriteNeverCutsWhatWasThereBefore(t *testing.T) {
	p := filepath.Join(t.TempDir(), "out.jsonl")
	s, err := Open("f", p, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	filePublish(t, s, "a")
	// A line another writer appended since (not a walpost: it would wait
	// for the lock) stays: only the failed write's own bytes are cut.
	appendBehind(t, p, publish.AppendJSONLine(nil, msg("x", `1`)))
	s.testWrite = func(b []byte) (int, error) {
		n, _ := s.f.Write(b[:len(b)-3])
		return n, unix.EIO
	}
	if err := s.Publish(context.Background(), []*message.Message{msg("b", `1`)}); err == nil {
		t.Fatal("no error")
	}
	if got := fileIDs(t, p); got != "a,x" {
		t.Fatalf("file holds %s, want a,x", got)
	}
}

func TestFileSinkCloseReleasesTheLockForTheNextOpenInTheSameProcess(t *testing.T) {
	p := filepath.Join(t.TempDir(), "out.jsonl")
	for _, id := range []string{"a", "b", "c"} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s, err := OpenContext(ctx, "f", p, Options{})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		filePublish(t, s, id)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); !errors.Is(err, os.ErrClosed) {
			t.Fatalf("second Close: %v", err)
		}
	}
	if got := fileIDs(t, p); got != "a,b,c" {
		t.Fatalf("file holds %s", got)
	}
}

func TestFileSinkRefusesADirectoryOrFIFO(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open("f", dir, false); err == nil {
		t.Fatal("opened a directory")
	}
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Skip(err)
	}
	if _, err := Open("f", fifo, false); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("err = %v", err)
	}
}

func TestFileSinkWaitingOpenTakesTheFileNowAtThePathWhenTheOldOneWasMovedAway(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "out.jsonl")
	first, err := Open("f", p, false)
	if err != nil {
		t.Fatal(err)
	}
	filePublish(t, first, "a")
	var logs fileLogBuffer
	done := make(chan error, 1)
	var second *Sink
	go func() {
		var err error
		second, err = OpenContext(context.Background(), "f", p, Options{Log: zerolog.New(&logs)})
		done <- err
	}()
	if !fileWaitFor(10*time.Second, func() bool { return strings.Contains(logs.String(), "locked by another process") }) {
		t.Fatalf("the second open did not wait; logs: %s", logs.String())
	}
	// An operator rotates the file while the standby waits.
	if err := os.Rename(p, p+".1"); err != nil {
		t.Fatal(err)
	}
	first.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	filePublish(t, second, "b")
	second.Close()
	if got := fileIDs(t, p); got != "b" {
		t.Fatalf("%s holds %s, want b", p, got)
	}
	if got := fileIDs(t, p+".1"); got != "a" {
		t.Fatalf("the moved file holds %s, want a", got)
	}
}

// appendBehind appends b to the file at p behind the sink's back, as a
// crash's torn write or another writer would.
func appendBehind(t *testing.T, p string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
}
