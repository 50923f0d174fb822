package publish

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestDialContextReturnsTheDialsResult: a dial that finishes before ctx
// ends gives its connection or error, and nothing is discarded.
func TestDialContextReturnsTheDialsResult(t *testing.T) {
	discard := func(int) { t.Error("discarded a connection that was returned") }
	v, err := DialContext(t.Context(), func() (int, error) { return 7, nil }, discard)
	if v != 7 || err != nil {
		t.Errorf("DialContext = %d, %v; want 7, nil", v, err)
	}
	boom := errors.New("refused")
	if _, err := DialContext(t.Context(), func() (int, error) { return 0, boom }, discard); !errors.Is(err, boom) {
		t.Errorf("DialContext = %v, want %v", err, boom)
	}
}

// TestDialContextAbandonsASlowDialAndClosesItsLateConnection: when ctx
// ends first DialContext returns at once with ctx.Err(), and the
// connection the dial makes afterwards is discarded (closed), not leaked;
// a late failure discards nothing.
func TestDialContextAbandonsASlowDialAndClosesItsLateConnection(t *testing.T) {
	for _, late := range []error{nil, errors.New("refused")} {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
		release := make(chan struct{})
		discarded := make(chan int, 1)
		start := time.Now()
		_, err := DialContext(ctx, func() (int, error) {
			<-release
			return 9, late
		}, func(v int) { discarded <- v })
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
			t.Fatalf("DialContext = %v after %s, want DeadlineExceeded at once", err, time.Since(start))
		}
		close(release)
		select {
		case v := <-discarded:
			if late != nil || v != 9 {
				t.Errorf("late error %v: discarded %d", late, v)
			}
		case <-time.After(200 * time.Millisecond):
			if late == nil {
				t.Error("the late connection was not discarded")
			}
		}
	}
}
