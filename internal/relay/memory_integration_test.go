package relay

import (
	"fmt"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/relaytest"
)

// TestIntegrationSinkDownWithLargeMessagesKeepsMemoryBounded: with the
// only sink down and 80 MB of 100 KB messages behind it, the window
// (8 MiB here) fills and the stream stops reading soon after. What it has
// read but the pipeline not yet admitted to the window is bounded in
// bytes too (at most 64 batches of 256 KiB), so the heap stays within a
// few tens of MB instead of holding the backlog.
// Once the sink is back, every message arrives.
func TestIntegrationSinkDownWithLargeMessagesKeepsMemoryBounded(t *testing.T) {
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	path := filepath.Join(t.TempDir(), "out.jsonl")
	setGate(path, false)
	cfgPath := ob.Config(t, fmt.Sprintf("  - {name: down, kind: testgate, path: %s}", path),
		"relay: {window_bytes: 8388608, shutdown_timeout: 1s, retry_backoff: 200ms}")
	prepare(t, cfgPath)
	const n = 800 // of 100,000-byte payloads
	pgtest.Exec(t, url, fmt.Sprintf(`INSERT INTO %s (id, type, key, payload)
		SELECT gen_random_uuid(), 'big', 'k' || (g %% 10), jsonb_build_object('n', g, 'pad', repeat(md5(g::text), 3125)) FROM generate_series(1, %d) g`, ob.Table, n))
	s := startRelay(t, cfgPath)
	if !pgtest.WaitFor(30*time.Second, func() bool {
		s.r.mu.Lock()
		w := s.r.window
		s.r.mu.Unlock()
		if w == nil {
			return false
		}
		_, b := w.InFlight()
		return b >= 6<<20
	}) {
		t.Fatal("the window did not fill within 30s")
	}
	var peak uint64
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		peak = max(peak, ms.HeapAlloc)
	}
	t.Logf("sink down, 80 MB behind an 8 MiB window: live heap up to %.1f MB", float64(peak)/(1<<20))
	if peak > 40<<20 {
		t.Errorf("live heap reached %d MB with an 8 MiB window, want under 40 MB: the relay holds the backlog it read", peak>>20)
	}
	setGate(path, true)
	waitLines(t, path, n, 180*time.Second) // 80 MB through the race detector takes a minute
}
