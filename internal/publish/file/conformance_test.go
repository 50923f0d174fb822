package file_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/envelope"
	"github.com/walpost/walpost/internal/publish/file"
	"github.com/walpost/walpost/internal/publish/sinktest"
)

// noRefusal is why the file runs skip the refusal subtest.
const noRefusal = "the file and stdout sinks write one stream and refuse no message: one destination, nothing to overtake a parked head on"

var jsonLineFeatures = sinktest.Features{GlobalOrder: true, NullKey: true, LSN: true,
	BinaryPayload: true, ReencodesJSON: true, MaxPayload: 1 << 20}

func readFile(t testing.TB, path string) []*message.Message {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	msgs, err := sinktest.ReadJSONLines(f)
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

func TestFileSinkConformance(t *testing.T) {
	sinktest.Run(t, sinktest.Harness{Features: jsonLineFeatures, NoRefusal: noRefusal, Open: func(t *testing.T) *sinktest.Target {
		path := filepath.Join(t.TempDir(), "out.jsonl")
		s, err := file.Open("file", path, true)
		if err != nil {
			t.Fatal(err)
		}
		return &sinktest.Target{Sink: s, Read: func(t testing.TB) []*message.Message { return readFile(t, path) }}
	}})
}

// downWriter is a pipe that can break: while down, writes fail having
// written nothing.
type downWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	down bool
}

func (w *downWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.down {
		return 0, errors.New("reader gone away (simulated)")
	}
	return w.buf.Write(p)
}

func TestStdoutSinkConformance(t *testing.T) {
	sinktest.Run(t, sinktest.Harness{Features: jsonLineFeatures, NoRefusal: noRefusal, Open: func(t *testing.T) *sinktest.Target {
		w := &downWriter{}
		return &sinktest.Target{
			Sink: file.NewWriterSink("stdout", w),
			Read: func(t testing.TB) []*message.Message {
				w.mu.Lock()
				defer w.mu.Unlock()
				msgs, err := sinktest.ReadJSONLines(bytes.NewReader(w.buf.Bytes()))
				if err != nil {
					t.Fatal(err)
				}
				return msgs
			},
			Outage: func(t testing.TB) func() {
				w.mu.Lock()
				w.down = true
				w.mu.Unlock()
				return func() { w.mu.Lock(); w.down = false; w.mu.Unlock() }
			},
		}
	}})
}

var ceSettings = envelope.Settings{Format: envelope.CloudEvents, Source: envelope.DefaultSource}

// readCloudEventLines decodes lines of format: cloudevents with the
// CloudEvents Go SDK (json.Unmarshal into event.Event, then Validate) and
// maps each event back to its message: id, type, data (data_base64
// decoded), time, partitionkey as the key (none: NULL), walpostheaders as
// the headers, walpostlsn and walpostcommitlsn as the LSNs.
func readCloudEventLines(t testing.TB, b []byte) []*message.Message {
	t.Helper()
	var out []*message.Message
	for i, line := range bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var e event.Event
		if err := json.Unmarshal(line, &e); err != nil {
			t.Fatalf("line %d: the SDK refuses it: %v", i+1, err)
		}
		if err := e.Validate(); err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		m := &message.Message{ID: e.ID(), Type: e.Type(), Payload: e.Data(), PayloadJSON: !e.DataBase64, CommitTime: e.Time()}
		ext := e.Extensions()
		if pk, ok := ext[publish.ExtPartitionKey].(string); ok {
			m.Key, m.HasKey = pk, true
		}
		if hs, ok := ext[publish.ExtHeaders].(string); ok {
			if err := json.Unmarshal([]byte(hs), &m.Headers); err != nil {
				t.Fatalf("line %d: walpostheaders %q: %v", i+1, hs, err)
			}
		}
		var err1, err2 error
		lsn, _ := ext[publish.ExtLSN].(string)
		commit, _ := ext[publish.ExtCommitLSN].(string)
		m.LSN, err1 = pglogrepl.ParseLSN(lsn)
		m.CommitLSN, err2 = pglogrepl.ParseLSN(commit)
		if err := errors.Join(err1, err2); err != nil {
			t.Fatalf("line %d: LSN extensions: %v", i+1, err)
		}
		out = append(out, m)
	}
	return out
}

// ceLineFeatures: the CloudEvents lines carry what the raw lines do, and
// the commit time.
var ceLineFeatures = func() sinktest.Features {
	f := jsonLineFeatures
	f.CommitTime = time.Microsecond
	return f
}()

func TestFileSinkConformanceCloudEvents(t *testing.T) {
	sinktest.Run(t, sinktest.Harness{Features: ceLineFeatures, NoRefusal: noRefusal, Open: func(t *testing.T) *sinktest.Target {
		path := filepath.Join(t.TempDir(), "out.jsonl")
		s, err := file.OpenContext(context.Background(), "file", path, file.Options{Fsync: true, Envelope: ceSettings})
		if err != nil {
			t.Fatal(err)
		}
		return &sinktest.Target{Sink: s, Read: func(t testing.TB) []*message.Message {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			return readCloudEventLines(t, b)
		}}
	}})
}

func TestStdoutSinkConformanceCloudEvents(t *testing.T) {
	sinktest.Run(t, sinktest.Harness{Features: ceLineFeatures, NoRefusal: noRefusal, Open: func(t *testing.T) *sinktest.Target {
		var mu sync.Mutex
		var buf bytes.Buffer
		w := writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return buf.Write(p) })
		return &sinktest.Target{
			Sink: file.NewWriterSinkFormat("stdout", w, ceSettings),
			Read: func(t testing.TB) []*message.Message {
				mu.Lock()
				defer mu.Unlock()
				return readCloudEventLines(t, bytes.Clone(buf.Bytes()))
			},
		}
	}})
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
