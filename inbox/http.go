package inbox

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"
)

// DefaultIDHeader is the request header HTTPHandler reads the message id
// from when HTTPOptions.IDHeader is empty.
const DefaultIDHeader = "X-Message-Id"

// DefaultMaxBodyBytes is the largest request body HTTPHandler accepts when
// HTTPOptions.MaxBodyBytes is zero.
const DefaultMaxBodyBytes = 1 << 20

// Processor is the Process method that HTTPHandler calls. *Inbox is a
// Processor[pgx.Tx]; *SQLInbox is a Processor[*sql.Tx].
type Processor[Tx any] interface {
	Process(ctx context.Context, msgID string, effect func(ctx context.Context, tx Tx) error) (Result, error)
}

// Delivery is one webhook request, as HTTPHandler's effect sees it.
type Delivery struct {
	// ID is the message id, from the id header or the body's "id" field.
	ID string
	// Body is the request body, read in full.
	Body []byte
	// Header is the request's headers: with HTTPOptions.SigningSecrets
	// only those the signature covers, else all of them.
	Header http.Header
	// Request is the request; its Body has been read, use Delivery.Body.
	// With HTTPOptions.SigningSecrets its Header is Delivery.Header.
	Request *http.Request
}

// HTTPOptions configures HTTPHandler. The zero value is usable.
type HTTPOptions struct {
	// IDHeader is the header holding the message id. Empty means
	// DefaultIDHeader. When the request has no such header, the id is
	// taken from the "id" field of a JSON object body (as in the lines of
	// walpost's file and stdout sinks).
	IDHeader string
	// MaxBodyBytes is the largest body accepted; larger requests get 413.
	// Zero means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// SigningSecrets, when not empty, makes the handler verify every
	// request's SignatureHeader (VerifyRequest, constant-time) before the
	// effect sees it, and answer 401 to a request that is not signed,
	// whose signature does not match its body and the headers it names
	// (the id, type, key, content type, CloudEvents attributes and outbox
	// headers the sender sets) with any of these secrets, that carries
	// such a header unsigned, or whose signature is older or newer than
	// SignatureTolerance. The effect then sees only the signed headers
	// (Delivery.Header, Delivery.Request.Header): a header a proxy added
	// is not there. List the new and the old secret while rotating it.
	// The webhook sink signs with its `secret:` (docs/sinks/webhook.md,
	// docs/security.md).
	SigningSecrets [][]byte
	// SignatureTolerance is how far a signature's timestamp may be from
	// the receiver's clock; zero means DefaultSignatureTolerance.
	SignatureTolerance time.Duration
	// AcceptSignatureV1Until, when after now, also accepts requests
	// signed with the old scheme v1 only (which signs the id and body but
	// not the type, key or other headers; see SignatureHeader): the
	// transition while a sender is not upgraded yet. Set it to the date
	// by which every sender signs v2, and no later. The zero value, the
	// default, accepts v2 only and answers 401 to a v1-only request.
	AcceptSignatureV1Until time.Time
	// OnError, when set, is called with the request, the message id (""
	// when there is none) and the error of every request answered with a
	// 4xx or 5xx status, e.g. to log it. It must be safe for concurrent
	// use.
	OnError func(r *http.Request, msgID string, err error)
}

// HTTPHandler returns an http.Handler for webhook receivers that runs
// effect once per message id through p (an *Inbox or *SQLInbox):
//
//   - 200 "processed" when effect ran and committed, and 200 "duplicate"
//     when the id was already processed, so the sender stops retrying;
//   - 500 when effect or the database failed: nothing was recorded, and
//     the sender should retry;
//   - 428 Precondition Required when the request carries no message id
//     (no IDHeader, no "id" field in a JSON object body). That is a
//     mismatch of sender and receiver (a batch sent to a handler of one
//     message per request, an IDHeader the sender does not set), not a
//     fault of one message: walpost's webhook sink stops on 428 with a
//     hint, instead of parking every message as refused;
//   - 400 when the body cannot be read, 413 when it is over
//     HTTPOptions.MaxBodyBytes;
//   - 401 when HTTPOptions.SigningSecrets is set and the request's
//     signature is missing, does not match its body and signed headers
//     (a request replayed with another id, type, key or headers), leaves
//     a header derived from the message unsigned, is of the old scheme
//     v1 after HTTPOptions.AcceptSignatureV1Until, or is stale:
//     nothing was recorded (a sender with the wrong secret keeps
//     failing, which is what it should see).
//
// The response body never carries error details; use HTTPOptions.OnError.
// The handler is safe for concurrent use when p is.
func HTTPHandler[Tx any](p Processor[Tx], effect func(ctx context.Context, tx Tx, d Delivery) error, opts HTTPOptions) http.Handler {
	if opts.IDHeader == "" {
		opts.IDHeader = DefaultIDHeader
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fail := func(status int, id string, err error) {
			if opts.OnError != nil {
				opts.OnError(r, id, err)
			}
			http.Error(w, http.StatusText(status), status)
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, opts.MaxBodyBytes))
		if err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				fail(http.StatusRequestEntityTooLarge, "", err)
			} else {
				fail(http.StatusBadRequest, "", err)
			}
			return
		}
		id := requestID(r, opts.IDHeader, body)
		if id == "" {
			fail(http.StatusPreconditionRequired, "", errors.New("inbox: request has no message id (no "+opts.IDHeader+" header, no \"id\" field in a JSON body)"))
			return
		}
		d := Delivery{ID: id, Body: body, Header: r.Header, Request: r}
		if len(opts.SigningSecrets) > 0 {
			// The signature covers the id header (or the body holding
			// the id) and every header derived from the message: the
			// effect sees only what was signed.
			signed, err := VerifyRequest(r.Header, id, body, time.Now(), VerifyOptions{
				Secrets:       opts.SigningSecrets,
				Tolerance:     opts.SignatureTolerance,
				IDHeader:      opts.IDHeader,
				AcceptV1Until: opts.AcceptSignatureV1Until,
			})
			if err != nil {
				fail(http.StatusUnauthorized, "", err)
				return
			}
			d.Header = signed
			d.Request = r.Clone(r.Context())
			d.Request.Header = signed
		}
		// Process's span continues the trace of the request's traceparent.
		res, err := p.Process(ContextFromHeaders(r.Context(), r.Header.Get), id, func(ctx context.Context, tx Tx) error {
			return effect(ctx, tx, d)
		})
		if err != nil {
			fail(http.StatusInternalServerError, id, err)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, res.String()+"\n")
	})
}

// requestID returns the message id of a request: the header named
// header, else the "id" field of a JSON object body; "" when neither
// holds one. Spaces at either end are trimmed.
func requestID(r *http.Request, header string, body []byte) string {
	if id := strings.TrimSpace(r.Header.Get(header)); id != "" {
		return id
	}
	var v struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(body, &v) == nil {
		return strings.TrimSpace(v.ID)
	}
	return ""
}
