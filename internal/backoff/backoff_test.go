package backoff

import (
	"context"
	"math"
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
	if d := b.Next(); d < 50*time.Millisecond || d > 100*time.Millisecond {
		t.Fatalf("after Reset: wait %v, want 50ms to 100ms", d)
	}
	if d := b.Next(); d < 100*time.Millisecond || d > 200*time.Millisecond {
		t.Fatalf("second wait after Reset: %v, want 100ms to 200ms", d)
	}
}

// TestNextNeverExceedsMax: max bounds every wait, the first included (a
// start above max, as postgres.reconnect_backoff: 100ms gives the
// reconnect backoff that starts at 250ms), and a long outage's many
// failures neither overflow nor grow the wait past it.
func TestNextNeverExceedsMax(t *testing.T) {
	b := New(250*time.Millisecond, 100*time.Millisecond)
	if d := b.Next(); d > 100*time.Millisecond {
		t.Fatalf("first wait %v with max 100ms", d)
	}
	b = New(time.Millisecond, 30*time.Second)
	for i := range 10000 {
		if d := b.Next(); d < 0 || d > 30*time.Second {
			t.Fatalf("wait %d: %v, want 0 to 30s", i+1, d)
		}
	}
	if d := b.Next(); d < 15*time.Second {
		t.Fatalf("wait after 10000 failures %v, want the step at max (15s to 30s)", d)
	}
}

// TestNextJitterCoversItsRange: waits spread over half to all of the step,
// not stuck at one end, so processes that failed together do not retry
// in step.
func TestNextJitterCoversItsRange(t *testing.T) {
	lo, hi := time.Hour, time.Duration(0)
	for range 2000 {
		d := New(time.Second, time.Second).Next()
		lo, hi = min(lo, d), max(hi, d)
	}
	if lo < 500*time.Millisecond || hi > time.Second {
		t.Fatalf("waits from %v to %v, want within 500ms to 1s", lo, hi)
	}
	if lo > 550*time.Millisecond || hi < 950*time.Millisecond {
		t.Fatalf("waits from %v to %v in 2000 draws: the jitter does not cover 500ms to 1s", lo, hi)
	}
}

func TestStepIsDeterministicAndBounded(t *testing.T) {
	const ms = time.Millisecond
	for _, tc := range []struct {
		start, max time.Duration
		attempt    int
		want       time.Duration
	}{
		{100 * ms, 30 * time.Second, 1, 100 * ms},
		{100 * ms, 30 * time.Second, 0, 100 * ms},  // less than 1 counts as 1
		{100 * ms, 30 * time.Second, -5, 100 * ms}, // likewise
		{100 * ms, 30 * time.Second, 2, 200 * ms},
		{100 * ms, 30 * time.Second, 9, 25600 * ms},
		{100 * ms, 30 * time.Second, 10, 30 * time.Second},
		{100 * ms, 30 * time.Second, math.MaxInt, 30 * time.Second}, // no overflow
		{100 * ms, time.Duration(math.MaxInt64), 200, time.Duration(math.MaxInt64)},
		{250 * ms, 100 * ms, 1, 100 * ms}, // start above max: max
		{0, time.Second, 5, 0},
		{100 * ms, time.Nanosecond, 3, time.Nanosecond},
	} {
		if got := Step(tc.start, tc.max, tc.attempt); got != tc.want {
			t.Errorf("Step(%v, %v, %d) = %v, want %v", tc.start, tc.max, tc.attempt, got, tc.want)
		}
	}
}

func TestBetweenStaysInItsBounds(t *testing.T) {
	seenLo, seenHi := false, false
	for range 1000 {
		d := Between(3, 5)
		if d < 3 || d > 5 {
			t.Fatalf("Between(3, 5) = %v", d)
		}
		seenLo, seenHi = seenLo || d == 3, seenHi || d == 5
	}
	if !seenLo || !seenHi {
		t.Fatalf("Between(3, 5) in 1000 draws: 3 seen %v, 5 seen %v; want both ends", seenLo, seenHi)
	}
	if d := Between(time.Second, time.Second); d != time.Second {
		t.Fatalf("Between(1s, 1s) = %v", d)
	}
	if d := Between(time.Second, time.Millisecond); d != time.Second {
		t.Fatalf("Between(1s, 1ms) = %v, want lo", d)
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
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	start := time.Now()
	if Sleep(ctx, time.Hour) {
		t.Fatal("Sleep reported a full wait on a context canceled during it")
	}
	if waited := time.Since(start); waited > 10*time.Second {
		t.Fatalf("Sleep returned %v after its context ended, want at once", waited)
	}
}
