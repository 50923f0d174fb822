package backoff

import (
	"context"
	"testing"
	"time"
)

func TestNextDoublesUpToMaxWithJitterAndResetStartsAgain(t *testing.T) {
	b := New(100*time.Millisecond, time.Second)
	for i, step := range []time.Duration{100, 200, 400, 800, 1000, 1000} {
		step *= time.Millisecond
		if d := b.Next(); d < step/2 || d > step {
			t.Fatalf("attempt %d: wait %v, want %v to %v", i+1, d, step/2, step)
		}
	}
	b.Reset()
	if d := b.Next(); d > 100*time.Millisecond {
		t.Fatalf("after Reset: wait %v, want at most 100ms", d)
	}
}

func TestSleepReturnsWhenTheContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, time.Hour) {
		t.Fatal("Sleep reported a full wait on a canceled context")
	}
	if !Sleep(context.Background(), time.Millisecond) {
		t.Fatal("Sleep did not report a full wait")
	}
}
