// Package claims3 fetches the payloads that walpost's relay.claim_check
// stored in S3, for a receive loop's inbox.ClaimCheck:
//
//	client := s3.NewFromConfig(awsCfg)
//	opts := inboxsqs.Options{ClaimCheck: inbox.WithClaimCheck(claims3.New(client, "my-bucket", "walpost/"))}
//
// The Fetcher reads only the bucket, and the keys under the prefix, it is
// given: the relay's claim_check bucket and prefix. A message naming any
// other object is refused (inbox.ErrClaimCheckScope), never fetched
// (docs/security.md, "The claim-check fetchers' scope").
//
// It lives apart from package inbox so that only receivers that use it
// build the AWS SDK. The client needs s3:GetObject on the bucket; walpost
// does not delete the objects (docs/claim-check.md, "Retention").
package claims3

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/walpost/walpost/inbox"
)

// Fetcher reads objects of one bucket, under one key prefix, with one S3
// client. It is safe for concurrent use.
type Fetcher struct {
	client         *s3.Client
	bucket, prefix string
}

var (
	_ inbox.Fetcher = (*Fetcher)(nil)
	_ inbox.Scoped  = (*Fetcher)(nil)
)

// New returns a Fetcher that reads with client the objects of bucket
// whose keys start with prefix ("" for the whole bucket): relay.claim_check's
// bucket and prefix (default walpost/). Changed by issue 42: New took
// no bucket, and read any.
func New(client *s3.Client, bucket, prefix string) *Fetcher {
	return &Fetcher{client: client, bucket: bucket, prefix: prefix}
}

// CheckScope returns nil when ref is s3://BUCKET/KEY with f's bucket and
// a key under its prefix, else an error wrapping inbox.ErrClaimCheckScope
// (inbox.Scoped).
func (f *Fetcher) CheckScope(ref string) error {
	bucket, key, err := Split(ref)
	if err != nil {
		return fmt.Errorf("%w: %w", inbox.ErrClaimCheckScope, err)
	}
	switch {
	case f.bucket == "":
		return fmt.Errorf("claims3: %w: New was given no bucket", inbox.ErrClaimCheckScope)
	case bucket != f.bucket || !strings.HasPrefix(key, f.prefix) || dotSegment(key):
		return fmt.Errorf("claims3: %w: %s is not in bucket %s under %q: refused, not fetched", inbox.ErrClaimCheckScope, ref, f.bucket, f.prefix)
	}
	return nil
}

// Fetch gets the object at ref, s3://BUCKET/KEY (the key path-escaped),
// when CheckScope accepts it; otherwise nothing is fetched.
func (f *Fetcher) Fetch(ctx context.Context, ref string) ([]byte, error) {
	if err := f.CheckScope(ref); err != nil {
		return nil, err
	}
	bucket, key, _ := Split(ref)
	out, err := f.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		return nil, fmt.Errorf("claims3: getting %s: %w", ref, err)
	}
	defer out.Body.Close()
	data, err := io.ReadAll(out.Body)
	if err != nil {
		return nil, fmt.Errorf("claims3: reading %s: %w", ref, err)
	}
	return data, nil
}

// Split returns the bucket and key of ref, s3://BUCKET/KEY.
func Split(ref string) (bucket, key string, err error) {
	rest, ok := strings.CutPrefix(ref, "s3://")
	if !ok {
		return "", "", fmt.Errorf("claims3: %s is not an s3:// reference", ref)
	}
	b, k, ok := strings.Cut(rest, "/")
	if !ok || b == "" || k == "" {
		return "", "", fmt.Errorf("claims3: %s names no bucket and key", ref)
	}
	if key, err = url.PathUnescape(k); err != nil {
		return "", "", fmt.Errorf("claims3: %s: %w", ref, err)
	}
	return b, key, nil
}

// dotSegment reports whether name has a . or .. path segment, which a
// server or proxy on the way might resolve out of the prefix.
func dotSegment(name string) bool {
	for seg := range strings.SplitSeq(name, "/") {
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
}
