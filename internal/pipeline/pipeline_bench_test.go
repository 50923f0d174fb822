package pipeline

import (
	"context"
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/checkpoint"
	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/decoder"
	"github.com/walpost/walpost/internal/layout"
	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/replication"
	"github.com/walpost/walpost/internal/store"
)

// BenchmarkPipeline measures the pipeline's hot path without PostgreSQL
// (go test -bench Pipeline -benchmem ./internal/pipeline): b.N rows in
// 100-row transactions, one transaction per input batch, decoded, tracked,
// routed to two sinks whose runners publish to a sink that takes
// everything at once, and settled. allocs/op is per row, for both sinks.
func BenchmarkPipeline(b *testing.B) {
	benchPipeline(b, 100, false, []config.Route{{}, {Include: []string{"order.*"}}})
}

// BenchmarkPipelineSingleRowTxns is the shape of 1,000 single-row
// transactions/s (BENCHMARKS.md's paced run): one sink, and Begin, Insert
// and Commit each in an input batch of its own, as the stream sends them
// when they arrive apart. allocs/op is per row (= per transaction).
func BenchmarkPipelineSingleRowTxns(b *testing.B) {
	benchPipeline(b, 1, true, []config.Route{{}})
}

func benchPipeline(b *testing.B, perTxn int, split bool, routes []config.Route) {
	var batches [][]replication.Event
	base := pglogrepl.LSN(0x1000)
	for done := 0; done < b.N; done += perTxn {
		var rows []row
		for i := done; i < min(done+perTxn, b.N); i++ {
			rows = append(rows, row{i, "order.created"})
		}
		commit := base + 0x10*pglogrepl.LSN(len(rows)+1)
		t := txn(uint32(len(batches)+1), base, commit, rows...)
		if split {
			for _, ev := range t {
				batches = append(batches, []replication.Event{ev})
			}
		} else {
			batches = append(batches, t)
		}
		base = commit + 0x10
	}
	tracker := checkpoint.New(0)
	window := NewWindow(10_000, 1<<30)
	p := New(Options{Decoder: decoder.New(decoder.Mapping{Schema: "public", Name: "outbox", Columns: layout.Default}),
		Tracker: tracker, Window: window, Routes: routes, DeadLetters: &fakeDead{}, Log: zerolog.Nop()})
	progress := &nopProgress{}
	done := make(chan struct{})
	for i := range routes {
		st := NewSettler(SettlerOptions{Sink: sinkName(i), Tracker: tracker, Window: window, Progress: progress, Log: zerolog.Nop()})
		r := publish.NewRunner(nopSink{}, p.Out(i), publish.RunnerOptions{Ack: st.Ack, Log: zerolog.Nop()})
		go func() {
			if err := r.Run(context.Background()); err != nil {
				panic(err)
			}
			done <- struct{}{}
		}()
	}
	events := make(chan []replication.Event, 64)
	events <- []replication.Event{relation(0x100)}
	b.ReportAllocs()
	b.ResetTimer()
	go func() {
		for _, bt := range batches {
			events <- bt
		}
		close(events)
	}()
	if err := p.Run(context.Background(), events); err != nil {
		b.Fatal(err)
	}
	for range routes {
		<-done
	}
	b.StopTimer()
	if want := base - 0x10 + 8; b.N > 0 && tracker.Confirmed() != want {
		b.Fatalf("confirmed %s, want %s", tracker.Confirmed(), want)
	}
}

type nopSink struct{}

func (nopSink) Name() string                                      { return "nop" }
func (nopSink) Close() error                                      { return nil }
func (nopSink) Publish(context.Context, []*message.Message) error { return nil }

type nopProgress struct{}

func (nopProgress) Acked(string, store.Position) {}
