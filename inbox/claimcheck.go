package inbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
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

// ErrClaimCheckScope means a claim-checked message names an object outside
// the stores its ClaimCheck may read (Scoped, WithClaimCheck's scope): it
// is refused, never fetched. It wraps ErrClaimCheck. The relay never
// sends such a reference (it carries its own headers apart from the row's
// and leaves the row's walpost-* entries out), so it comes from another
// writer of the queue or topic: docs/security.md, "The claim-check
// fetchers' scope".
var ErrClaimCheckScope = fmt.Errorf("%w: reference outside the fetcher's scope", ErrClaimCheck)

// Fetcher reads the object a claim-checked message names. The fetchers
// for Azure Blob Storage and S3 are in inbox/claimazblob and
// inbox/claims3, so that package inbox needs no cloud SDK.
type Fetcher interface {
	// Fetch returns the whole object at ref, the value of the
	// walpost-claim-check header. An error is retried by redelivery.
	Fetch(ctx context.Context, ref string) ([]byte, error)
}

// Scoped is implemented by a Fetcher that reads only some objects
// (claimazblob.Fetcher, claims3.Fetcher: one container or bucket, and a
// name prefix). CheckScope returns nil when ref is an object f may read,
// else an error wrapping ErrClaimCheckScope saying why not. A ClaimCheck
// fetches no reference CheckScope refuses.
type Scoped interface {
	CheckScope(ref string) error
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
	scope   []string
}

// WithClaimCheck returns the ClaimCheck of a receive loop that fetches
// claim-checked payloads with f (claimazblob.New, claims3.New, or several
// stores behind one FetcherFunc that picks by the reference's scheme).
//
// It fetches only references under one of scope's prefixes, or that f
// accepts when it is Scoped (claimazblob.New and claims3.New are: they
// take the container or bucket, and the prefix, they may read), and
// refuses any other with ErrClaimCheckScope, never fetching it; so is a
// reference with a query, a fragment, or a . or .. path segment. A
// prefix names the store and ends its path with a slash, e.g.
// "s3://BUCKET/walpost/"; a FetcherFunc without one refuses every
// reference. Changed by issue 42: before it, any reference a message
// named was fetched.
func WithClaimCheck(f Fetcher, scope ...string) *ClaimCheck {
	c := &ClaimCheck{fetcher: f, scope: slices.Clone(scope)}
	for i, p := range c.scope {
		// A prefix that names only a bucket or host ("s3://outbox")
		// would also match "s3://outbox-other/…": end it with a slash.
		if _, rest, ok := strings.Cut(p, "://"); ok && !strings.Contains(rest, "/") {
			c.scope[i] = p + "/"
		}
	}
	return c
}

// allowed returns nil when c may fetch ref, or an error wrapping
// ErrClaimCheckScope saying why not.
func (c *ClaimCheck) allowed(ref string) error {
	if strings.ContainsAny(ref, "?#\\") {
		return fmt.Errorf("%w: %s has a query, fragment or backslash: refused, not fetched", ErrClaimCheckScope, ref)
	}
	path := ref
	if _, rest, ok := strings.Cut(ref, "://"); ok {
		path = rest
	}
	path, err := url.PathUnescape(path)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrClaimCheckScope, ref, err)
	}
	for seg := range strings.SplitSeq(path, "/") {
		if seg == "." || seg == ".." {
			return fmt.Errorf("%w: %s has a . or .. segment: refused, not fetched", ErrClaimCheckScope, ref)
		}
	}
	for _, p := range c.scope {
		if p != "" && strings.HasPrefix(ref, p) {
			return nil
		}
	}
	if s, ok := c.fetcher.(Scoped); ok {
		err := s.CheckScope(ref)
		if err != nil && !errors.Is(err, ErrClaimCheckScope) {
			err = fmt.Errorf("%w: %w", ErrClaimCheckScope, err)
		}
		return err
	}
	if len(c.scope) == 0 {
		return fmt.Errorf("%w: message names %s, but the ClaimCheck has no scope to read (give claims3.New or claimazblob.New "+
			"the bucket or container the relay's claim_check writes to, or WithClaimCheck the reference prefix)", ErrClaimCheckScope, ref)
	}
	return fmt.Errorf("%w: %s is not under %s, the store this loop reads: refused, not fetched "+
		"(the relay writes only there; another writer of the queue named it)", ErrClaimCheckScope, ref, strings.Join(c.scope, " or "))
}

// Resolve returns a message's payload: body itself when header (a lookup
// of the message's headers by name, "" when absent) has no
// walpost-claim-check, else the object it names, when within c's scope
// (WithClaimCheck), fetched and checked against walpost-claim-check-size
// and walpost-claim-check-sha256. Errors wrap ErrClaimCheck. With c nil,
// it returns body.
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
	if err := c.allowed(ref); err != nil {
		return nil, err
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
