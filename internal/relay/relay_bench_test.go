package relay

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/admin"
	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/relaytest"
)

// BenchmarkCatchUp measures the relay in process (go test -bench CatchUp
// -cpuprofile cpu.out ./internal/relay): b.N messages of ~300 bytes in
// 1,000-row transactions are committed first, then the relay runs until
// the slot is confirmed past the last commit. The bench tool (./bench)
// measures the cdc binary against pg_recvlogical and polling relays.
func BenchmarkCatchUp(b *testing.B) {
	for _, kind := range []string{"discard", "file"} {
		b.Run(kind, func(b *testing.B) {
			url := pgtest.URL(b)
			ob := relaytest.NewOutbox(b, url)
			sink := "  - {name: s, kind: discard}"
			if kind == "file" {
				sink = fmt.Sprintf("  - {name: s, kind: file, path: %s/out.jsonl}", b.TempDir())
			}
			cfgPath := ob.Config(b, sink, "")
			cfg, err := config.Load(cfgPath)
			if err != nil {
				b.Fatal(err)
			}
			cfg.Log.Level = "warn"
			r, err := New(cfg, zerolog.Nop(), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			if err := admin.Setup(context.Background(), cfg, func(string) {}); err != nil {
				b.Fatal(err)
			}
			pad := "0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdef"
			for done := 0; done < b.N; done += 1000 {
				n := min(1000, b.N-done)
				pgtest.Exec(b, url, fmt.Sprintf(`INSERT INTO %s (id, type, key, payload)
					SELECT gen_random_uuid(), 'order.created', 'k' || (g %% 100), jsonb_build_object('n', g, 'pad', '%s') FROM generate_series(1, %d) g`, ob.Table, pad, n))
			}
			conn := pgtest.Connect(b, url)
			var endS string
			conn.QueryRow(context.Background(), "SELECT pg_current_wal_lsn()::text").Scan(&endS)
			end, _ := pglogrepl.ParseLSN(endS)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			b.ResetTimer()
			start := time.Now()
			go func() { done <- r.Run(ctx) }()
			for relaytest.SlotConfirmed(b, conn, ob.Slot) < end {
				time.Sleep(20 * time.Millisecond)
			}
			el := time.Since(start)
			b.StopTimer()
			cancel()
			<-done
			b.ReportMetric(float64(b.N)/el.Seconds(), "msgs/s")
		})
	}
}
