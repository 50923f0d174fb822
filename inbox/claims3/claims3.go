// Package claims3 fetches the payloads that walpost's relay.claim_check
// stored in S3, for a receive loop's inbox.ClaimCheck:
//
//	client := s3.NewFromConfig(awsCfg)
//	opts := inboxsqs.Options{ClaimCheck: inbox.WithClaimCheck(claims3.New(client))}
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

// Fetcher reads objects with one S3 client. It is safe for concurrent use.
type Fetcher struct {
	client *s3.Client
}

var _ inbox.Fetcher = (*Fetcher)(nil)

// New returns a Fetcher that reads with client.
func New(client *s3.Client) *Fetcher { return &Fetcher{client: client} }

// Fetch gets the object at ref, s3://BUCKET/KEY (the key path-escaped).
func (f *Fetcher) Fetch(ctx context.Context, ref string) ([]byte, error) {
	bucket, key, err := Split(ref)
	if err != nil {
		return nil, err
	}
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
