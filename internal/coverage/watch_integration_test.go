package coverage

import (
	"context"
	"math"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/checkpoint"
	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/outboxdb"
	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/pipeline"
	"github.com/walpost/walpost/internal/relaytest"
	"github.com/walpost/walpost/internal/store"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// fakePipeline has handled the whole stream and takes every fill row.
type fakePipeline struct {
	mu  sync.Mutex
	ids []string
}

func (p *fakePipeline) Handled() pglogrepl.LSN { return pglogrepl.LSN(math.MaxUint64) }

func (p *fakePipeline) Fill(ctx context.Context, rows []pipeline.FillRow) (pipeline.FillDone, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range rows {
		p.ids = append(p.ids, r.Msg.ID)
	}
	return pipeline.FillDone{Relayed: len(rows)}, nil
}

func (p *fakePipeline) filled() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.ids)
}

// TestIntegrationWatcherLooksOnARelationAndRelaysTheGap drives the loop
// with its dependencies as options (no relay): the outbox taken out of
// its publication is seen (the metric, a gap open), and once it is
// published again the rows written in between are read from the table
// with replay's keyset reader and handed to the pipeline, and the gap is
// closed.
func TestIntegrationWatcherLooksOnARelationAndRelaysTheGap(t *testing.T) {
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	pgtest.Exec(t, url, "CREATE PUBLICATION "+ob.Publication+" FOR TABLE "+ob.Table+" WITH (publish = 'insert')")
	cfg, err := config.Load(ob.Config(t, "  - {name: out, kind: discard}", ""))
	if err != nil {
		t.Fatal(err)
	}
	tables := store.TablesOf(cfg)
	tables.Coverage = "" // kept in memory: the test's own
	m := Metrics{Gaps: prometheus.NewCounter(prometheus.CounterOpts{Name: "g"}), GapRows: prometheus.NewCounter(prometheus.CounterOpts{Name: "r"}),
		NotPublished: prometheus.NewGauge(prometheus.GaugeOpts{Name: "n"}), GapOpen: prometheus.NewGauge(prometheus.GaugeOpts{Name: "o"})}
	p := &fakePipeline{}
	relations := make(chan struct{}, 1)
	poke := func() {
		select {
		case relations <- struct{}{}:
		default:
		}
	}
	w := New(Options{Config: cfg, URL: url, Target: outboxdb.Target(cfg), Tables: tables, TimeColumn: "created_at",
		Pipeline: p, Tracker: checkpoint.New(0), Relations: relations, Metrics: m, Log: zerolog.Nop()})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w.First(ctx)
	if testutil.ToFloat64(m.NotPublished) != 0 || testutil.ToFloat64(m.GapOpen) != 0 {
		t.Fatal("the first look found the outbox not published, or a gap")
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()

	conn := pgtest.Connect(t, url)
	pgtest.Exec(t, url, "ALTER PUBLICATION "+ob.Publication+" DROP TABLE "+ob.Table)
	between := relaytest.NewMsg("between", "k", 1)
	ob.InsertTx(t, conn, between)
	poke() // as a Relation message would: the look comes now, not after Quiet (the test's speed, not asserted)
	if !pgtest.WaitFor(30*time.Second, func() bool { return testutil.ToFloat64(m.NotPublished) == 1 }) {
		t.Fatal("the watcher did not see the outbox unpublished")
	}
	if testutil.ToFloat64(m.GapOpen) != 1 || testutil.ToFloat64(m.Gaps) != 1 {
		t.Fatalf("gap open %v, gaps %v; want 1, 1", testutil.ToFloat64(m.GapOpen), testutil.ToFloat64(m.Gaps))
	}
	pgtest.Exec(t, url, "ALTER PUBLICATION "+ob.Publication+" ADD TABLE "+ob.Table)
	poke()
	if !pgtest.WaitFor(30*time.Second, func() bool { return testutil.ToFloat64(m.GapOpen) == 0 }) {
		t.Fatal("the gap was not closed")
	}
	if got := p.filled(); !slices.Contains(got, between.ID) {
		t.Fatalf("the fill handed the pipeline %v, want the row written in between %s", got, between.ID)
	}
	if testutil.ToFloat64(m.NotPublished) != 0 || testutil.ToFloat64(m.GapRows) < 1 {
		t.Fatalf("not published %v, gap rows %v after the fill", testutil.ToFloat64(m.NotPublished), testutil.ToFloat64(m.GapRows))
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
