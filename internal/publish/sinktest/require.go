package sinktest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/publish"
)

// Context returns a context that ends after d or when the test ends,
// whichever comes first: the deadline of one Publish (or broker call) of a
// test.
func Context(tb testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	tb.Cleanup(cancel)
	return ctx
}

// RequirePermanent fails the test unless err is publish.Permanent, and
// reports each of wants its text does not name.
func RequirePermanent(tb testing.TB, err error, wants ...string) {
	tb.Helper()
	if err == nil || !publish.IsPermanent(err) {
		tb.Fatalf("got %v, want a Permanent error", err)
	}
	for _, w := range wants {
		if !strings.Contains(err.Error(), w) {
			tb.Errorf("error %q does not name %q", err, w)
		}
	}
}

// RequireTransient fails the test unless err is an error that is not
// publish.Permanent: one the relay retries.
func RequireTransient(tb testing.TB, err error) {
	tb.Helper()
	if err == nil || publish.IsPermanent(err) {
		tb.Fatalf("got %v, want an error that is not Permanent", err)
	}
}
