package inbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
)

// The headers of a claim-checked message (docs/claim-check.md): walpost's
// relay.claim_check stored the payload, too large for the broker, in Azure
// Blob Storage or S3, sent the message with an empty body, and named the
// object in these headers (application properties on Service Bus,
// message attributes on SQS and SNS, headers elsewhere).
const (
	// HeaderClaimCheck is the object's URL: https://ACCOUNT.blob.core.windows.net/CONTAINER/NAME
	// (azblob; the endpoint as configured, e.g. Azurite's) or s3://BUCKET/KEY.
	HeaderClaimCheck = "walpost-claim-check"
	// HeaderClaimCheckSize is the payload's length in bytes, in decimal.
	HeaderClaimCheckSize = "walpost-claim-check-size"
	// HeaderClaimCheckSHA256 is the SHA-256 of the payload, in lower-case hex.
	HeaderClaimCheckSHA256 = "walpost-claim-check-sha256"
)

// ErrClaimCheck means a claim-checked message's payload could not be
// fetched or is not the payload the message names (size or SHA-256 differ);
// a receive loop treats it like a failing effect (the message is given
// back and delivered again).
var ErrClaimCheck = errors.New("inbox: claim check")

// Fetcher reads the object a claim-checked message names. The fetchers
// for Azure Blob Storage and S3 are in inbox/claimazblob and
// inbox/claims3, so that package inbox needs no cloud SDK.
type Fetcher interface {
	// Fetch returns the whole object at ref, the value of the
	// walpost-claim-check header. An error is retried by redelivery.
	Fetch(ctx context.Context, ref string) ([]byte, error)
}

// FetcherFunc adapts a function to Fetcher.
type FetcherFunc func(ctx context.Context, ref string) ([]byte, error)

// Fetch calls f.
func (f FetcherFunc) Fetch(ctx context.Context, ref string) ([]byte, error) { return f(ctx, ref) }

// ClaimCheck resolves claim-checked messages for a receive loop: set it as
// the loop's Options.ClaimCheck, and the loop hands the effect the stored
// payload in place of the empty body. A nil *ClaimCheck resolves nothing.
// It is safe for concurrent use when its Fetcher is.
type ClaimCheck struct {
	fetcher Fetcher
}

// WithClaimCheck returns the ClaimCheck of a receive loop that fetches
// claim-checked payloads with f (claimazblob.New, claims3.New, or several
// stores behind one FetcherFunc that picks by the reference's scheme).
func WithClaimCheck(f Fetcher) *ClaimCheck {
	return &ClaimCheck{fetcher: f}
}

// Resolve returns a message's payload: body itself when header (a lookup
// of the message's headers by name, "" when absent) has no
// walpost-claim-check, else the object it names, fetched and checked
// against walpost-claim-check-size and walpost-claim-check-sha256. Errors
// wrap ErrClaimCheck. With c nil, it returns body.
func (c *ClaimCheck) Resolve(ctx context.Context, header func(name string) string, body []byte) ([]byte, error) {
	if c == nil {
		return body, nil
	}
	ref := header(HeaderClaimCheck)
	if ref == "" {
		return body, nil
	}
	if c.fetcher == nil {
		return nil, fmt.Errorf("%w: message names %s, but the ClaimCheck has no Fetcher", ErrClaimCheck, ref)
	}
	size, err := strconv.ParseInt(header(HeaderClaimCheckSize), 10, 64)
	if err != nil || size < 0 {
		return nil, fmt.Errorf("%w: %s: header %s is %q, not a size", ErrClaimCheck, ref, HeaderClaimCheckSize, header(HeaderClaimCheckSize))
	}
	want := header(HeaderClaimCheckSHA256)
	data, err := c.fetcher.Fetch(ctx, ref)
	if err != nil {
		return nil, fmt.Errorf("%w: fetching %s: %w", ErrClaimCheck, ref, err)
	}
	if int64(len(data)) != size {
		return nil, fmt.Errorf("%w: %s holds %d bytes, the message names %d (was the object replaced or cut?)", ErrClaimCheck, ref, len(data), size)
	}
	sum := sha256.Sum256(data)
	if got := hex.EncodeToString(sum[:]); got != want {
		return nil, fmt.Errorf("%w: %s has SHA-256 %s, the message names %q", ErrClaimCheck, ref, got, want)
	}
	return data, nil
}
