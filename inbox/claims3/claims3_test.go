package claims3

import (
	"context"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/walpost/walpost/inbox"
)

// TestFetcherReadsOnlyItsBucketAndPrefix: a reference to another bucket,
// outside the prefix, or to no bucket at all is refused with
// inbox.ErrClaimCheckScope before any request (the client has no
// endpoint to reach); so is every reference of a Fetcher given no bucket.
func TestFetcherReadsOnlyItsBucketAndPrefix(t *testing.T) {
	f := New(s3.New(s3.Options{Region: "us-east-1"}), "outbox", "walpost/")
	for _, ref := range []string{"s3://private/payroll.json", "s3://outbox/other/x", "s3://outbox-2/walpost/x", "https://outbox/walpost/x", "s3://outbox/", "s3://outbox/walpost/../payroll.json", "s3://outbox/walpost/%2E%2E/payroll.json"} {
		if err := f.CheckScope(ref); !errors.Is(err, inbox.ErrClaimCheckScope) {
			t.Errorf("%s: %v, want ErrClaimCheckScope", ref, err)
		}
		if _, err := f.Fetch(context.Background(), ref); !errors.Is(err, inbox.ErrClaimCheckScope) {
			t.Errorf("Fetch %s: %v, want ErrClaimCheckScope", ref, err)
		}
	}
	if err := f.CheckScope("s3://outbox/walpost/slot/sink/id"); err != nil {
		t.Errorf("a reference in scope: %v", err)
	}
	if err := New(nil, "", "").CheckScope("s3://outbox/walpost/x"); !errors.Is(err, inbox.ErrClaimCheckScope) {
		t.Errorf("no bucket: %v, want ErrClaimCheckScope", err)
	}
}
