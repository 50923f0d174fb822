package inbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/pgtest"
)

func TestDDLMatchesSQLFile(t *testing.T) {
	b, err := os.ReadFile("../sql/inbox.sql")
	if err != nil {
		t.Fatal(err)
	}
	if got := DDL(DefaultTable); got != string(b) {
		t.Fatalf("sql/inbox.sql and inbox.DDL(%q) differ; update one to match the other.\nfile:\n%s\nDDL:\n%s", DefaultTable, b, got)
	}
}

func TestNewRejectsInvalidOptions(t *testing.T) {
	for _, tc := range []struct {
		opts Options
		want error
	}{
		{Options{Table: "a.b.c"}, ErrInvalidTable},
		{Options{Table: ".inbox"}, ErrInvalidTable},
		{Options{Retention: -time.Hour}, ErrInvalidOptions},
		{Options{CleanupBatch: -1}, ErrInvalidOptions},
	} {
		if _, err := New(nil, tc.opts); !errors.Is(err, tc.want) {
			t.Errorf("New(%+v) error = %v, want %v", tc.opts, err, tc.want)
		}
		if _, err := NewSQL(nil, tc.opts); !errors.Is(err, tc.want) {
			t.Errorf("NewSQL(%+v) error = %v, want %v", tc.opts, err, tc.want)
		}
	}
	ib, err := New(nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if ib.c.table != DefaultTable || ib.c.retention != DefaultRetention || ib.c.batch != DefaultCleanupBatch {
		t.Fatalf("zero Options gave table %s, retention %v, batch %d", ib.c.table, ib.c.retention, ib.c.batch)
	}
}

func TestProcessRejectsAnEmptyIDBeforeTouchingTheDatabase(t *testing.T) {
	ib, _ := New(nil, Options{}) // a nil Beginner would panic if used
	if _, err := ib.Process(context.Background(), "", nil); !errors.Is(err, ErrEmptyID) {
		t.Fatalf("error = %v, want ErrEmptyID", err)
	}
	sib, _ := NewSQL(nil, Options{})
	if _, err := sib.Process(context.Background(), "", nil); !errors.Is(err, ErrEmptyID) {
		t.Fatalf("error = %v, want ErrEmptyID", err)
	}
}

func TestResultString(t *testing.T) {
	if Processed.String() != "processed" || Duplicate.String() != "duplicate" || Result(0).String() != "Result(0)" {
		t.Fatal(Processed, Duplicate, Result(0))
	}
}

func TestIntegrationConcurrentCopiesRunTheEffectOnce(t *testing.T) {
	const copies = 50
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			f := newFixture(t)
			ib := f.open(t, v, Options{}, copies+2)
			ctx := context.Background()

			start := make(chan struct{})
			var processed, duplicate, effects atomic.Int32
			var wg sync.WaitGroup
			for range copies {
				wg.Go(func() {
					<-start
					res, err := ib.process(ctx, "msg-1", func(ctx context.Context, exec execFunc) error {
						if err := f.increment(exec); err != nil {
							return err
						}
						if effects.Add(1) > 1 {
							return nil // a bug: the final assertions report it
						}
						// Hold the first copy's transaction open until every
						// other copy is blocked on its key, so the test proves
						// the concurrent path and not just sequential ones.
						if !pgtest.WaitFor(15*time.Second, func() bool { return f.waitingInserts(t, ib) == copies-1 }) {
							t.Errorf("only %d of %d other copies are waiting on the first copy's key", f.waitingInserts(t, ib), copies-1)
						}
						return nil
					})
					switch {
					case err != nil:
						t.Errorf("Process: %v", err)
					case res == Processed:
						processed.Add(1)
					case res == Duplicate:
						duplicate.Add(1)
					}
				})
			}
			close(start)
			wg.Wait()

			if processed.Load() != 1 || duplicate.Load() != copies-1 {
				t.Fatalf("%d Processed and %d Duplicate, want 1 and %d", processed.Load(), duplicate.Load(), copies-1)
			}
			if n := f.effects(t); n != 1 {
				t.Fatalf("effect committed %d times, want once", n)
			}
			if n := f.count(t, "id = $1", "msg-1"); n != 1 {
				t.Fatalf("inbox has %d rows for msg-1, want 1", n)
			}
		})
	}
}

func TestIntegrationWaitingCopyRunsTheEffectWhenTheFirstCopyRollsBack(t *testing.T) {
	errFirst := errors.New("first copy fails")
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			f := newFixture(t)
			ib := f.open(t, v, Options{}, 4)
			ctx := context.Background()

			firstInEffect := make(chan struct{})
			var firstErr error
			done := make(chan struct{})
			go func() {
				defer close(done)
				_, firstErr = ib.process(ctx, "msg-1", func(ctx context.Context, exec execFunc) error {
					if err := f.increment(exec); err != nil {
						return err
					}
					close(firstInEffect)
					if !pgtest.WaitFor(15*time.Second, func() bool { return f.waitingInserts(t, ib) == 1 }) {
						t.Error("the second copy never waited on the first copy's key")
					}
					return errFirst
				})
			}()
			<-firstInEffect
			res, err := ib.process(ctx, "msg-1", func(ctx context.Context, exec execFunc) error { return f.increment(exec) })
			<-done
			if !errors.Is(firstErr, errFirst) {
				t.Fatalf("first copy: error = %v, want %v", firstErr, errFirst)
			}
			if err != nil || res != Processed {
				t.Fatalf("second copy: %v, %v; want Processed", res, err)
			}
			if n := f.effects(t); n != 1 {
				t.Fatalf("effects committed: %d, want 1 (the second copy's)", n)
			}
		})
	}
}

func TestIntegrationRedeliveryAfterCommitBeforeAckIsDuplicate(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			f := newFixture(t)
			ctx := context.Background()

			// The receiver processes the message, commits, and dies before
			// it acknowledges the message to the broker.
			first := f.open(t, v, Options{}, 2)
			res, err := first.process(ctx, "msg-1", func(ctx context.Context, exec execFunc) error { return f.increment(exec) })
			if err != nil || res != Processed {
				t.Fatalf("first delivery: %v, %v; want Processed", res, err)
			}
			first.close()

			// The broker redelivers to a new process.
			restarted := f.open(t, v, Options{}, 2)
			ran := false
			res, err = restarted.process(ctx, "msg-1", func(ctx context.Context, exec execFunc) error {
				ran = true
				return f.increment(exec)
			})
			if err != nil || res != Duplicate {
				t.Fatalf("redelivery: %v, %v; want Duplicate", res, err)
			}
			if ran || f.effects(t) != 1 {
				t.Fatalf("redelivery ran the effect again (ran=%v, effects=%d)", ran, f.effects(t))
			}
		})
	}
}

func TestIntegrationFailedEffectRecordsNothingAndARetryProcesses(t *testing.T) {
	errEffect := errors.New("downstream table is locked")
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			f := newFixture(t)
			ib := f.open(t, v, Options{}, 1) // one connection: a leaked transaction would show
			ctx := context.Background()

			res, err := ib.process(ctx, "msg-1", func(ctx context.Context, exec execFunc) error {
				if err := f.increment(exec); err != nil {
					return err
				}
				return errEffect
			})
			if !errors.Is(err, errEffect) || res != 0 {
				t.Fatalf("failing effect: %v, %v; want an error wrapping %v", res, err, errEffect)
			}
			if !strings.Contains(err.Error(), `"msg-1"`) {
				t.Errorf("error %q does not name the message", err)
			}
			if n := f.count(t, "true"); n != 0 || f.effects(t) != 0 {
				t.Fatalf("after a failed effect: %d inbox rows, %d effects; want none", n, f.effects(t))
			}

			res, err = ib.process(ctx, "msg-1", func(ctx context.Context, exec execFunc) error { return f.increment(exec) })
			if err != nil || res != Processed {
				t.Fatalf("retry: %v, %v; want Processed", res, err)
			}
			if f.count(t, "id = 'msg-1'") != 1 || f.effects(t) != 1 {
				t.Fatalf("after the retry: %d inbox rows, %d effects; want 1 and 1", f.count(t, "true"), f.effects(t))
			}
		})
	}
}

func TestIntegrationCleanupDeletesOnlyExpiredIDsInBatchesWhileProcessRuns(t *testing.T) {
	const (
		batch   = 50
		expired = 520
		recent  = 100
		workers = 4
	)
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			f := newFixture(t)
			ib := f.open(t, v, Options{Retention: 24 * time.Hour, CleanupBatch: batch}, workers+2)
			ctx := context.Background()

			pgtest.Exec(t, f.url,
				fmt.Sprintf(`INSERT INTO %s (id) SELECT 'old-' || g FROM generate_series(1, %d) g`, f.ident(), expired),
				fmt.Sprintf(`INSERT INTO %s (id) SELECT 'recent-' || g FROM generate_series(1, %d) g`, f.ident(), recent),
				`UPDATE `+f.ident()+` SET processed_at = now() - interval '25 hours' WHERE id LIKE 'old-%'`,
				`UPDATE `+f.ident()+` SET processed_at = now() - interval '23 hours' WHERE id LIKE 'recent-%'`)

			// Someone holds a lock on one expired id: Cleanup skips it
			// instead of waiting.
			locker := pgtest.Connect(t, f.url)
			lockTx, err := locker.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := lockTx.Exec(ctx, `SELECT 1 FROM `+f.ident()+` WHERE id = 'old-1' FOR UPDATE`); err != nil {
				t.Fatal(err)
			}

			// Receivers keep processing new messages, and redeliveries of
			// recent ones, all through the cleanup.
			stop := make(chan struct{})
			var live [workers]atomic.Int64
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						res, err := ib.process(ctx, fmt.Sprintf("live-%d-%d", w, i), nil)
						if err != nil || res != Processed {
							t.Errorf("new message during cleanup: %v, %v", res, err)
							return
						}
						live[w].Add(1)
						id := fmt.Sprintf("recent-%d", 1+(i*workers+w)%recent)
						if res, err := ib.process(ctx, id, nil); err != nil || res != Duplicate {
							t.Errorf("redelivery of %s during cleanup: %v, %v; want Duplicate", id, res, err)
							return
						}
					}
				})
			}
			for w := range workers {
				if !pgtest.WaitFor(10*time.Second, func() bool { return live[w].Load() > 0 }) {
					t.Fatalf("worker %d processed nothing", w)
				}
			}

			processedSoFar := func() (n int64) {
				for w := range workers {
					n += live[w].Load()
				}
				return n
			}
			// Between Cleanup's statements, wait for receivers to commit
			// more messages, so the two certainly interleave.
			var batches []int64
			ib.core().afterCleanupBatch = func(n int64) {
				batches = append(batches, n)
				before := processedSoFar()
				if !pgtest.WaitFor(10*time.Second, func() bool { return processedSoFar() > before }) {
					t.Errorf("no message processed between two Cleanup statements")
				}
			}
			before := processedSoFar()
			cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			deleted, err := ib.cleanup(cctx)
			cancel()
			during := processedSoFar() - before
			close(stop)
			wg.Wait()
			if err != nil {
				t.Fatalf("Cleanup: %v (deleted %d)", err, deleted)
			}

			if deleted != expired-1 {
				t.Fatalf("Cleanup deleted %d, want %d (all expired but the locked one)", deleted, expired-1)
			}
			wantBatches := make([]int64, 0, expired/batch+1)
			for range (expired - 1) / batch {
				wantBatches = append(wantBatches, batch)
			}
			wantBatches = append(wantBatches, (expired-1)%batch)
			if fmt.Sprint(batches) != fmt.Sprint(wantBatches) {
				t.Fatalf("Cleanup batches %v, want %v", batches, wantBatches)
			}
			total := processedSoFar()
			t.Logf("%d messages processed while Cleanup ran, %d in all", during, total)
			if n := f.count(t, "id LIKE 'old-%'"); n != 1 {
				t.Fatalf("%d expired ids left, want 1 (the locked one)", n)
			}
			if n := f.count(t, "id LIKE 'recent-%'"); n != recent {
				t.Fatalf("%d recent ids left, want %d: Cleanup deleted ids within retention", n, recent)
			}
			if n := f.count(t, "id LIKE 'live-%'"); int64(n) != total {
				t.Fatalf("%d live ids recorded, want %d", n, total)
			}

			// Once the lock is gone, the next run takes the skipped id.
			if err := lockTx.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			ib.core().afterCleanupBatch = nil
			if deleted, err := ib.cleanup(ctx); err != nil || deleted != 1 {
				t.Fatalf("second Cleanup: deleted %d, %v; want 1", deleted, err)
			}
		})
	}
}

func TestIntegrationEnsureTableIsIdempotentAcrossConcurrentCallers(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			f := newFixture(t)
			ib := v.open(t, f.url, Options{Table: f.table}, 8)
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					if err := ib.ensureTable(context.Background()); err != nil {
						t.Errorf("EnsureTable: %v", err)
					}
				})
			}
			wg.Wait()
			if err := ib.ensureTable(context.Background()); err != nil {
				t.Fatalf("EnsureTable on an existing table: %v", err)
			}
			var idx string
			if err := f.obs.QueryRow(context.Background(),
				`SELECT indexdef FROM pg_indexes WHERE schemaname = 'public' AND tablename = $1 AND indexname LIKE '%processed_at_idx'`,
				strings.TrimPrefix(f.table, "public.")).Scan(&idx); err != nil {
				t.Fatalf("processed_at index: %v", err)
			}
		})
	}
}
