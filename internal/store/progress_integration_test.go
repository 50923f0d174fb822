package store

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/pgtest"
)

// TestIntegrationProgressWritesEachChangeAfterAnIdleSpell: Run wakes on a
// change, not on a clock: a position acknowledged after a long quiet
// spell is written (and one acknowledged while a write is pending goes in
// the same or the next write), and the last one is written at the stop.
func TestIntegrationProgressWritesEachChangeAfterAnIdleSpell(t *testing.T) {
	url := pgtest.URL(t)
	conn := pgtest.Connect(t, url)
	tb := Tables{Slot: "s", Progress: "public." + pgtest.Name(t, "pr")}
	t.Cleanup(func() { pgtest.Exec(t, url, "DROP TABLE IF EXISTS "+tb.Progress) })
	if _, err := Setup(context.Background(), conn, tb); err != nil {
		t.Fatal(err)
	}
	p := NewProgress(url, tb, nil, zerolog.Nop())
	ctx, cancel := context.WithCancel(context.Background())
	final := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, 10*time.Millisecond, final) }()
	saved := func(want pglogrepl.LSN) bool {
		got, err := LoadProgress(context.Background(), conn, tb)
		return err == nil && got["out"].CommitLSN == want
	}
	p.Acked("out", Position{CommitLSN: 0x100, LSN: 0x100})
	if !pgtest.WaitFor(30*time.Second, func() bool { return saved(0x100) }) {
		t.Fatal("the first position was not written")
	}
	time.Sleep(50 * time.Millisecond) // idle: several intervals without a change
	p.Acked("out", Position{CommitLSN: 0x200, LSN: 0x200})
	p.Acked("out", Position{CommitLSN: 0x300, LSN: 0x300})
	if !pgtest.WaitFor(30*time.Second, func() bool { return saved(0x300) }) {
		t.Fatal("the positions acknowledged after an idle spell were not written")
	}
	p.Acked("out", Position{CommitLSN: 0x400, LSN: 0x400})
	cancel()
	close(final)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !saved(0x400) {
		t.Fatal("the last position was not written at the stop")
	}
}
