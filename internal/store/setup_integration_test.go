package store

import (
	"context"
	"os"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// TestIntegrationSetupAtTheSameTimeCreatesEachTableOnce: cdc init run by
// several processes at once (two deployments starting, tests in
// parallel) succeeds in each: CREATE TABLE IF NOT EXISTS racing another
// fails on the catalog's unique index, and the loser finds the table
// made. Each table is reported created (by one of them at least).
func TestIntegrationSetupAtTheSameTimeCreatesEachTableOnce(t *testing.T) {
	url := pgtest.URL(t)
	for round := range 5 {
		tb := Tables{Slot: "s"}
		for _, p := range []*string{&tb.Progress, &tb.DeadLetter, &tb.Adopt, &tb.Coverage} {
			*p = "public." + pgtest.Name(t, "st")
			name := *p
			t.Cleanup(func() { pgtest.Exec(t, url, "DROP TABLE IF EXISTS "+name) })
		}
		const n = 8
		conns := make([]*pgx.Conn, n)
		for i := range conns {
			conns[i] = pgtest.Connect(t, url)
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		results := make([][]Result, n)
		errs := make([]error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				results[i], errs[i] = Setup(context.Background(), conns[i], tb)
			}()
		}
		close(start)
		wg.Wait()
		created := map[string]int{}
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("round %d: Setup #%d: %v", round, i, errs[i])
			}
			for _, r := range results[i] {
				if r.Created {
					created[r.Table]++
				}
			}
		}
		for _, table := range []string{tb.Progress, tb.DeadLetter, tb.Adopt, tb.Coverage} {
			if created[table] == 0 {
				t.Errorf("round %d: %s reported created by none", round, table)
			}
		}
	}
}
