package publish_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/sinktest"
)

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
	sinktest.Run(t, sinktest.Harness{Features: jsonLineFeatures, Open: func(t *testing.T) *sinktest.Target {
		path := filepath.Join(t.TempDir(), "out.jsonl")
		s, err := publish.OpenFileSink("file", path, true)
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
	sinktest.Run(t, sinktest.Harness{Features: jsonLineFeatures, Open: func(t *testing.T) *sinktest.Target {
		w := &downWriter{}
		return &sinktest.Target{
			Sink: publish.NewWriterSink("stdout", w),
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
