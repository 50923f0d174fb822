// Package claimazblob fetches the payloads that walpost's relay.claim_check
// stored in Azure Blob Storage, for a receive loop's inbox.ClaimCheck:
//
//	client, _ := azblob.NewClientFromConnectionString(cs, nil) // or azblob.NewClient(url, cred, nil)
//	opts := inboxsb.Options{ClaimCheck: inbox.WithClaimCheck(claimazblob.New(client))}
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

// Fetcher reads blobs of one storage account. It is safe for concurrent
// use.
type Fetcher struct {
	client *azblob.Client
}

var _ inbox.Fetcher = (*Fetcher)(nil)

// New returns a Fetcher that reads with client. A reference outside
// client's account (its URL) is an error.
func New(client *azblob.Client) *Fetcher { return &Fetcher{client: client} }

// Fetch downloads the blob at ref, a blob URL under the client's service
// URL (https://ACCOUNT.blob.core.windows.net/CONTAINER/NAME).
func (f *Fetcher) Fetch(ctx context.Context, ref string) ([]byte, error) {
	container, name, err := f.split(ref)
	if err != nil {
		return nil, err
	}
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
	base := f.client.URL()
	if !strings.HasSuffix(base, "/") {
		base += "/"
	}
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
