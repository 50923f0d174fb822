// Package claimazblob fetches the payloads that walpost's relay.claim_check
// stored in Azure Blob Storage, for a receive loop's inbox.ClaimCheck:
//
//	client, _ := azblob.NewClientFromConnectionString(cs, nil) // or azblob.NewClient(url, cred, nil)
//	opts := inboxsb.Options{ClaimCheck: inbox.WithClaimCheck(claimazblob.New(client, "payloads", "walpost/"))}
//
// The Fetcher reads only the container, and the blobs under the prefix,
// it is given: the relay's claim_check container and prefix. A message
// naming any other blob is refused (inbox.ErrClaimCheckScope), never
// fetched (docs/security.md, "The claim-check fetchers' scope").
//
// It lives apart from package inbox so that only receivers that use it
// build the Azure SDK. The client needs read access (Storage Blob Data
// Reader) to the container; walpost does not delete the blobs
// (docs/claim-check.md, "Retention").
package claimazblob

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"

	"github.com/walpost/walpost/inbox"
)

// Fetcher reads the blobs of one container, under one name prefix. It
// is safe for concurrent use.
type Fetcher struct {
	client            *azblob.Client
	container, prefix string
}

var (
	_ inbox.Fetcher = (*Fetcher)(nil)
	_ inbox.Scoped  = (*Fetcher)(nil)
)

// New returns a Fetcher that reads with client the blobs of container
// whose names start with prefix ("" for the whole container):
// relay.claim_check's container and prefix (default walpost/). A
// reference outside them is an error. Changed by issue 42: New took no
// container, and read any of the account.
func New(client *azblob.Client, container, prefix string) *Fetcher {
	return &Fetcher{client: client, container: container, prefix: prefix}
}

// CheckScope returns nil when ref is a blob URL under the client's URL
// with f's container and a name under its prefix, else an error wrapping
// inbox.ErrClaimCheckScope (inbox.Scoped).
func (f *Fetcher) CheckScope(ref string) error {
	container, name, err := f.split(ref)
	if err != nil {
		return fmt.Errorf("%w: %w", inbox.ErrClaimCheckScope, err)
	}
	switch {
	case f.container == "":
		return fmt.Errorf("claimazblob: %w: New was given no container", inbox.ErrClaimCheckScope)
	case container != f.container || !strings.HasPrefix(name, f.prefix) || dotSegment(name):
		return fmt.Errorf("claimazblob: %w: %s is not in container %s under %q: refused, not fetched", inbox.ErrClaimCheckScope, ref, f.container, f.prefix)
	}
	return nil
}

// base returns the client's URL, ending in a slash.
func (f *Fetcher) base() string {
	base := f.client.URL()
	if !strings.HasSuffix(base, "/") {
		base += "/"
	}
	return base
}

// Fetch downloads the blob at ref, a blob URL under the client's service
// URL (https://ACCOUNT.blob.core.windows.net/CONTAINER/NAME), when
// CheckScope accepts it; otherwise nothing is fetched.
func (f *Fetcher) Fetch(ctx context.Context, ref string) ([]byte, error) {
	if err := f.CheckScope(ref); err != nil {
		return nil, err
	}
	container, name, _ := f.split(ref)
	resp, err := f.client.DownloadStream(ctx, container, name, nil)
	if err != nil {
		return nil, fmt.Errorf("claimazblob: downloading %s: %w", ref, err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if resp.ContentLength != nil && *resp.ContentLength > 0 {
		buf.Grow(int(*resp.ContentLength))
	}
	if _, err := io.Copy(&buf, resp.Body); err != nil {
		return nil, fmt.Errorf("claimazblob: reading %s: %w", ref, err)
	}
	return buf.Bytes(), nil
}

// split returns the container and blob name of ref.
func (f *Fetcher) split(ref string) (container, name string, err error) {
	base := f.base()
	rest, ok := strings.CutPrefix(ref, base)
	if !ok {
		return "", "", fmt.Errorf("claimazblob: %s is not a blob of this client's account (%s)", ref, base)
	}
	if i := strings.IndexAny(rest, "?#"); i >= 0 {
		rest = rest[:i]
	}
	c, n, ok := strings.Cut(rest, "/")
	if !ok || c == "" || n == "" {
		return "", "", fmt.Errorf("claimazblob: %s names no container and blob", ref)
	}
	if name, err = url.PathUnescape(n); err != nil {
		return "", "", fmt.Errorf("claimazblob: %s: %w", ref, err)
	}
	return c, name, nil
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
