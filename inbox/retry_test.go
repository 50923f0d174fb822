package inbox

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestBackoffDoublesFromTheFirstWaitUpToTheLimitWithJitter(t *testing.T) {
	for _, tc := range []struct {
		attempt int
		limit   time.Duration
		max     time.Duration
	}{
		{1, time.Hour, 100 * time.Millisecond},
		{3, time.Hour, 400 * time.Millisecond},
		{5, 250 * time.Millisecond, 250 * time.Millisecond},
		{1000, 20 * time.Millisecond, 20 * time.Millisecond},
		{40, 0, DefaultRetryBackoff}, // zero limit: the default
		{0, time.Hour, FirstRetryBackoff},
	} {
		for range 50 {
			if d := Backoff(tc.attempt, tc.limit); d < tc.max*4/5 || d > tc.max {
				t.Fatalf("Backoff(%d, %v) = %v, want within [%v, %v]", tc.attempt, tc.limit, d, tc.max*4/5, tc.max)
			}
		}
	}
}

func TestSleepBackoffReturnsWhenTheContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := SleepBackoff(ctx, 1, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("SleepBackoff with an ended ctx = %v, want context.Canceled", err)
	}
	if err := SleepBackoff(context.Background(), 1, time.Millisecond); err != nil {
		t.Fatalf("SleepBackoff = %v", err)
	}
}

// fakeProcessor is Process in memory: beginErr fails attempts before the
// effect (a database that is down); a panic in the effect is recovered as
// Process does.
type fakeProcessor struct {
	seen     map[string]bool
	beginErr func() error
}

func (p *fakeProcessor) Process(ctx context.Context, id string, effect func(ctx context.Context, tx struct{}) error) (Result, error) {
	if p.beginErr != nil {
		if err := p.beginErr(); err != nil {
			return 0, err
		}
	}
	if p.seen[id] {
		return Duplicate, nil
	}
	if err := runEffect(func() error { return effect(ctx, struct{}{}) }); err != nil {
		return 0, fmt.Errorf("inbox: message %q: effect failed, rolled back: %w", id, err)
	}
	p.seen[id] = true
	return Processed, nil
}

func TestProcessRetryingRetriesUntilTheEffectSucceeds(t *testing.T) {
	p := &fakeProcessor{seen: map[string]bool{}}
	calls := 0
	var attempts []int
	res, err := ProcessRetrying(context.Background(), p, "a", func(context.Context, struct{}) error {
		if calls++; calls < 3 {
			return errors.New("not yet")
		}
		return nil
	}, Retry{Backoff: time.Millisecond, MaxAttempts: 3, OnError: func(attempt int, err error) { attempts = append(attempts, attempt) }})
	if res != Processed || err != nil || calls != 3 || fmt.Sprint(attempts) != "[1 2]" {
		t.Fatalf("got %v, %v after %d calls, OnError for attempts %v; want Processed after 3 calls, OnError for [1 2]", res, err, calls, attempts)
	}
	if res, err := ProcessRetrying(context.Background(), p, "a", func(context.Context, struct{}) error { return nil }, Retry{}); res != Duplicate || err != nil {
		t.Fatalf("again: %v, %v; want Duplicate", res, err)
	}
}

func TestProcessRetryingCountsOnlyTheEffectsFailuresTowardsMaxAttempts(t *testing.T) {
	// The database fails three times before the effect runs: no message is
	// to blame, so MaxAttempts 2 does not give up.
	down := 3
	p := &fakeProcessor{seen: map[string]bool{}, beginErr: func() error {
		if down > 0 {
			down--
			return errors.New("connection refused")
		}
		return nil
	}}
	res, err := ProcessRetrying(context.Background(), p, "a", func(context.Context, struct{}) error { return nil }, Retry{Backoff: time.Millisecond, MaxAttempts: 2})
	if res != Processed || err != nil {
		t.Fatalf("database down 3 times, MaxAttempts 2: %v, %v; want Processed", res, err)
	}

	// An effect that returns an error, then panics: two failures, poison.
	boom := errors.New("bad payload")
	calls := 0
	res, err = ProcessRetrying(context.Background(), p, "b", func(context.Context, struct{}) error {
		if calls++; calls == 1 {
			return boom
		}
		panic("nil pointer")
	}, Retry{Backoff: time.Millisecond, MaxAttempts: 2})
	if res != 0 || !errors.Is(err, ErrTooManyAttempts) || !errors.Is(err, ErrPanicked) || calls != 2 || p.seen["b"] {
		t.Fatalf("failing then panicking effect, MaxAttempts 2: %v, %v after %d calls; want ErrTooManyAttempts wrapping the panic after 2", res, err, calls)
	}
}

func TestProcessRetryingStopsWhenTheContextEnds(t *testing.T) {
	p := &fakeProcessor{seen: map[string]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	res, err := ProcessRetrying(ctx, p, "a", func(context.Context, struct{}) error {
		if calls++; calls == 2 {
			cancel()
		}
		return errors.New("failing")
	}, Retry{Backoff: time.Millisecond}) // no MaxAttempts: only ctx ends it
	if res != 0 || !errors.Is(err, context.Canceled) || calls != 2 {
		t.Fatalf("got %v, %v after %d calls; want context.Canceled after 2", res, err, calls)
	}
}

// TestProcessOnceTellsTheEffectsFailuresFromTheDatabases: an error the
// effect returns or a panic in it is the effect's; a database that fails
// before the effect is not; a success or a duplicate is neither.
func TestProcessOnceTellsTheEffectsFailuresFromTheDatabases(t *testing.T) {
	ctx := context.Background()
	down := errors.New("database down")
	for _, c := range []struct {
		name       string
		dbErr      error
		id         string
		effect     func(context.Context, struct{}) error
		wantRes    Result
		wantEffect bool
		wantErr    bool
	}{
		{"effect succeeds", nil, "a", func(context.Context, struct{}) error { return nil }, Processed, false, false},
		{"duplicate", nil, "a", func(context.Context, struct{}) error { return errors.New("not run") }, Duplicate, false, false},
		{"effect fails", nil, "b", func(context.Context, struct{}) error { return errors.New("boom") }, 0, true, true},
		{"effect panics", nil, "c", func(context.Context, struct{}) error { panic("bug") }, 0, true, true},
		{"database down", down, "d", func(context.Context, struct{}) error { return nil }, 0, false, true},
	} {
		p := &fakeProcessor{seen: map[string]bool{"a": c.name == "duplicate"}, beginErr: func() error { return c.dbErr }}
		res, effectFailed, err := ProcessOnce(ctx, Processor[struct{}](p), c.id, c.effect)
		if res != c.wantRes || effectFailed != c.wantEffect || (err != nil) != c.wantErr {
			t.Errorf("%s: ProcessOnce = %v, %v, %v; want %v, %v, error %v", c.name, res, effectFailed, err, c.wantRes, c.wantEffect, c.wantErr)
		}
	}
}
