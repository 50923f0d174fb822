package inbox

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// SignatureHeader is the request header in which walpost's webhook sink
// signs each request when its `secret:` is set (docs/sinks/webhook.md,
// docs/security.md). The current scheme is v2 (SignRequest,
// VerifyRequest):
//
//	Walpost-Signature: t=1767225600,h=content-type;idempotency-key;x-message-id;x-message-type,v2=<64 hex digits>
//
// t is the time of sending in Unix seconds, h the names of the signed
// headers (lower case, sorted, separated by ';') and v2 the lower-case
// hex HMAC-SHA256, keyed with the shared secret, of
//
//	"v2" "\n" <t> "\n" <h> "\n" <name> ":" <value> "\n" … "\n" <body>
//
// one line per value of each header named in h, in the order of h and,
// within a header, in the order received, values without spaces or tabs
// at either end; then an empty line and the body exactly as sent. The
// sink signs every header it derives from the message (its id, type, key,
// content type, the CloudEvents attributes and the outbox headers
// column), so that a request whose type, key or headers were changed does
// not verify.
//
// The old scheme v1 (Sign, VerifySignature) signs only t, the idempotency
// key and the body:
//
//	Walpost-Signature: t=1767225600,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd
//
// v1 is the lower-case hex HMAC-SHA256, keyed with the shared secret, of
//
//	<t> "." <key> "\n" <body>
//
// t in decimal, a full stop, the request's idempotency key (its
// Idempotency-Key header: the message id in mode message, the batch's
// digest in mode batch) without spaces or tabs at either end, a newline,
// and the request body exactly as sent ("1767225600.0190b4c4-…\n{...}").
// Signing the key binds the id a receiver drops duplicates by to the
// body: a captured request replayed with another id does not verify. The
// key never holds a control character (the sink refuses such ids), so the
// newline ends it without ambiguity. v1 leaves X-Message-Type, the
// ordering key and the other headers unsigned; it is verified only during
// a transition the receiver opts into (HTTPOptions.AcceptSignatureV1Until,
// VerifyOptions.AcceptV1Until).
const SignatureHeader = "Walpost-Signature"

// DefaultSignatureTolerance is how far the signature's timestamp may be
// from the receiver's clock, either way, when no tolerance is given.
const DefaultSignatureTolerance = 5 * time.Minute

// The errors of VerifySignature; test with errors.Is.
var (
	// ErrNoSignature: the request carries no signature header.
	ErrNoSignature = errors.New("inbox: request is not signed (no " + SignatureHeader + " header)")
	// ErrBadSignature: the header is malformed, or no signature in it
	// matches the body with any of the secrets.
	ErrBadSignature = errors.New("inbox: request signature does not match its body")
	// ErrStaleSignature: the signature matches, but its timestamp is
	// further from now than the tolerance (a replayed request, or clocks
	// apart).
	ErrStaleSignature = errors.New("inbox: request signature is too old or in the future")
	// ErrSignatureV1 is wrapped (with ErrBadSignature) by the error of a
	// request signed with scheme v1 only, when v1 is no longer accepted.
	ErrSignatureV1 = errors.New("inbox: request is signed with the old scheme v1 only, " +
		"which does not cover its type, key and headers; upgrade the sender (walpost signs with v2), " +
		"or accept v1 for a transition (HTTPOptions.AcceptSignatureV1Until)")
)

// Sign returns the SignatureHeader value, of the old scheme v1, of a
// request with idempotency key key and body body, sent at t, signed with
// secret (see SignatureHeader). The webhook sink adds it beside v2 with
// signature_v1 (for receivers not yet upgraded); SignRequest makes v2.
func Sign(secret []byte, t time.Time, key string, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, ts, key, body))
}

// mac is the HMAC-SHA256 under secret of ts "." key "\n" body, key
// trimmed of spaces and tabs (HTTP receivers trim them off header values).
func mac(secret []byte, ts, key string, body []byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(ts))
	h.Write([]byte{'.'})
	h.Write([]byte(strings.Trim(key, " \t")))
	h.Write([]byte{'\n'})
	h.Write(body)
	return h.Sum(nil)
}

// VerifySignature checks header, a SignatureHeader value of scheme v1
// (VerifyRequest checks v2 and, during a transition, v1), against the
// request's idempotency key and body as received, at time now. key is the
// id the receiver will drop duplicates by: the Idempotency-Key header
// (equal to X-Message-Id in mode message), or the id header it reads.
// VerifySignature returns nil when one of the header's v1 signatures is
// the HMAC-SHA256 of "<t>.<key>\n<body>" under one of secrets (several
// secrets let a receiver accept the old and the new one while a secret is
// rotated; empty ones are ignored) and t is within tolerance of now
// (DefaultSignatureTolerance when tolerance is zero or negative).
// Otherwise it returns an error wrapping ErrNoSignature, ErrBadSignature
// (also for a key holding a control character, which the sink never
// signs) or ErrStaleSignature. Signatures are compared in constant time
// (hmac.Equal); keys other than t and v1 in the header are ignored, so
// that a later scheme can be added beside v1.
//
// Verify the body exactly as received, before parsing it: a JSON parser
// and re-encoder would not give back the signed bytes. Use the id that
// was verified, and no other, to drop duplicates: a request replayed
// with another id fails here.
//
// Deprecated: v1 does not sign the type, key or headers, so a request
// whose X-Message-Type was changed verifies. Use VerifyRequest, which
// checks v2 (and v1 only during a transition you set).
func VerifySignature(header, key string, body []byte, now time.Time, tolerance time.Duration, secrets ...[]byte) error {
	header = strings.TrimSpace(header)
	if header == "" {
		return ErrNoSignature
	}
	if tolerance <= 0 {
		tolerance = DefaultSignatureTolerance
	}
	var ts string
	var sigs [][]byte
	for _, part := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return fmt.Errorf("%w: malformed header (want t=<unix>,v1=<hex>)", ErrBadSignature)
		}
		switch k {
		case "t":
			if ts != "" {
				return fmt.Errorf("%w: t given twice", ErrBadSignature)
			}
			ts = v
		case "v1":
			if sig, err := hex.DecodeString(v); err == nil && len(sig) == sha256.Size {
				sigs = append(sigs, sig)
			}
		}
	}
	sec, perr := strconv.ParseInt(ts, 10, 64)
	if perr != nil || ts[0] == '+' || ts[0] == '-' {
		return fmt.Errorf("%w: no timestamp t=<unix seconds>", ErrBadSignature)
	}
	if len(sigs) == 0 {
		return fmt.Errorf("%w: no v1 signature", ErrBadSignature)
	}
	if strings.ContainsFunc(key, isControl) {
		return fmt.Errorf("%w: the idempotency key holds a control character", ErrBadSignature)
	}
	if !matches(sigs, ts, key, body, secrets) {
		return ErrBadSignature
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: signed at %s, %s from now (tolerance %s)",
			ErrStaleSignature, time.Unix(sec, 0).UTC().Format(time.RFC3339), d.Round(time.Second), tolerance)
	}
	return nil
}

// isControl reports whether r is an ASCII control character other than
// a tab.
func isControl(r rune) bool { return (r < ' ' && r != '\t') || r == 0x7f }

// matches reports whether one of sigs is the MAC of ts, key and body
// under one of secrets.
func matches(sigs [][]byte, ts, key string, body []byte, secrets [][]byte) bool {
	ok := false
	for _, s := range secrets {
		if len(s) == 0 {
			continue
		}
		want := mac(s, ts, key, body)
		for _, sig := range sigs {
			// Every pair is compared, so the time taken does not tell
			// which secret or signature matched.
			if hmac.Equal(sig, want) {
				ok = true
			}
		}
	}
	return ok
}

// SignRequest returns the SignatureHeader value, scheme v2, of a request
// with headers h and body body, sent at t, signed with secret: the
// headers of h named in names (case-insensitive; h's other headers are not
// signed) and the body (see SignatureHeader). Names are sent in lower
// case, sorted and without repeats. The webhook sink signs with it; tests
// of a receiver can too.
func SignRequest(secret []byte, t time.Time, h http.Header, names []string, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	list := make([]string, 0, len(names))
	for _, n := range names {
		list = append(list, strings.ToLower(n))
	}
	slices.Sort(list)
	list = slices.Compact(list)
	hl := strings.Join(list, ";")
	return "t=" + ts + ",h=" + hl + ",v2=" + hex.EncodeToString(mac2(secret, ts, hl, list, h, body))
}

// mac2 is the v2 HMAC-SHA256 under secret (see SignatureHeader) of the
// headers of h named in list (lower case) and body, with ts and hl the
// header's t and h as sent.
func mac2(secret []byte, ts, hl string, list []string, h http.Header, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	w := func(s string) { m.Write([]byte(s)) }
	w("v2\n")
	w(ts)
	w("\n")
	w(hl)
	w("\n")
	for _, n := range list {
		for _, v := range h.Values(n) {
			w(n)
			w(":")
			w(strings.Trim(v, " \t"))
			w("\n")
		}
	}
	w("\n")
	m.Write(body)
	return m.Sum(nil)
}

// VerifyOptions configures VerifyRequest.
type VerifyOptions struct {
	// Secrets are the shared secrets; a signature made with any of them
	// verifies (the new and the old one while a secret is rotated). Empty
	// ones are ignored.
	Secrets [][]byte
	// Tolerance is how far the signature's timestamp may be from now,
	// either way; zero means DefaultSignatureTolerance.
	Tolerance time.Duration
	// IDHeader is the header the receiver reads the message id from;
	// when present it must be signed. Empty means DefaultIDHeader.
	IDHeader string
	// AcceptV1Until, when after now, also accepts a request signed with
	// scheme v1 only (VerifySignature, with the id passed to
	// VerifyRequest): the transition for a sender that does not sign v2
	// yet. v1 leaves the type, key and headers unsigned, so set it to
	// the date by which every sender is upgraded, and no later. The zero
	// value accepts v2 only.
	AcceptV1Until time.Time
}

// VerifyRequest checks the SignatureHeader of a request with headers h
// and body body, as received, at time now, and returns the headers the
// signature covers (a new http.Header holding only those): the ones a
// receiver may act on.
//
// With a v2 signature (t, h and v2 keys; see SignatureHeader) it returns
// nil error when one v2 is the MAC of the named headers and the body under
// one of o.Secrets, t is within o.Tolerance of now, and every header of
// the request that the sender derives from the message is among the
// named ones: Content-Type, Idempotency-Key, X-Message-*, Ce-*,
// Walpost-* (but the signature) and o.IDHeader. So a request whose type,
// key, id, headers, body or timestamp was changed, or that carries one
// of those headers unsigned, fails. Headers not named (added by a proxy,
// say) are left out of the result.
//
// A request signed with v1 only is verified as VerifySignature does, with
// id (the id the receiver drops duplicates by), while now is before
// o.AcceptV1Until, and then all of h is returned; otherwise it fails with
// an error wrapping ErrBadSignature and ErrSignatureV1. A v1 beside a v2
// is ignored: a request carrying v2 must verify with v2.
//
// Errors wrap ErrNoSignature, ErrBadSignature or ErrStaleSignature, name
// the header at fault, and never hold a secret. Verify the body exactly
// as received, before parsing it.
func VerifyRequest(h http.Header, id string, body []byte, now time.Time, o VerifyOptions) (http.Header, error) {
	header := strings.TrimSpace(h.Get(SignatureHeader))
	if header == "" {
		return nil, ErrNoSignature
	}
	if len(h.Values(SignatureHeader)) > 1 {
		return nil, fmt.Errorf("%w: %s given twice", ErrBadSignature, SignatureHeader)
	}
	tolerance := o.Tolerance
	if tolerance <= 0 {
		tolerance = DefaultSignatureTolerance
	}
	idHeader := o.IDHeader
	if idHeader == "" {
		idHeader = DefaultIDHeader
	}
	sh, err := parseSignatureHeader(header)
	if err != nil {
		return nil, err
	}
	ts, hl, haveH, sigs := sh.ts, sh.hl, sh.haveH, sh.sigs
	if len(sigs) == 0 && !haveH {
		if !sh.v1 {
			return nil, fmt.Errorf("%w: no v2 signature", ErrBadSignature)
		}
		if !now.Before(o.AcceptV1Until) {
			return nil, fmt.Errorf("%w: %w", ErrBadSignature, ErrSignatureV1)
		}
		if err := VerifySignature(header, id, body, now, tolerance, o.Secrets...); err != nil {
			return nil, err
		}
		return h, nil
	}
	sec, perr := strconv.ParseInt(ts, 10, 64)
	if perr != nil || ts[0] == '+' || ts[0] == '-' {
		return nil, fmt.Errorf("%w: no timestamp t=<unix seconds>", ErrBadSignature)
	}
	if len(sigs) == 0 {
		return nil, fmt.Errorf("%w: no v2 signature", ErrBadSignature)
	}
	if !haveH {
		return nil, fmt.Errorf("%w: no h=<signed headers> beside v2", ErrBadSignature)
	}
	list, err := signedNames(hl, h, idHeader)
	if err != nil {
		return nil, err
	}
	ok := false
	for _, s := range o.Secrets {
		if len(s) == 0 {
			continue
		}
		want := mac2(s, ts, hl, list, h, body)
		for _, sig := range sigs {
			if hmac.Equal(sig, want) {
				ok = true
			}
		}
	}
	if !ok {
		return nil, ErrBadSignature
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return nil, fmt.Errorf("%w: signed at %s, %s from now (tolerance %s)",
			ErrStaleSignature, time.Unix(sec, 0).UTC().Format(time.RFC3339), d.Round(time.Second), tolerance)
	}
	out := make(http.Header, len(list))
	for _, n := range list {
		if vs := h.Values(n); len(vs) > 0 {
			out[http.CanonicalHeaderKey(n)] = slices.Clone(vs)
		}
	}
	return out, nil
}

// sigHeader is a parsed X-Walpost-Signature header (VerifyRequest).
type sigHeader struct {
	ts, hl string   // t= and h=
	haveH  bool     // h= given (it may be empty)
	v1     bool     // a v1= part given
	sigs   [][]byte // the v2= signatures
}

// parseSignatureHeader splits header into its parts, refusing a malformed
// one or a part given twice.
func parseSignatureHeader(header string) (sigHeader, error) {
	var sh sigHeader
	for _, part := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return sh, fmt.Errorf("%w: malformed header (want t=<unix>,h=<names>,v2=<hex>)", ErrBadSignature)
		}
		switch k {
		case "t":
			if sh.ts != "" {
				return sh, fmt.Errorf("%w: t given twice", ErrBadSignature)
			}
			sh.ts = v
		case "h":
			if sh.haveH {
				return sh, fmt.Errorf("%w: h given twice", ErrBadSignature)
			}
			sh.hl, sh.haveH = v, true
		case "v1":
			sh.v1 = true
		case "v2":
			if sig, err := hex.DecodeString(v); err == nil && len(sig) == sha256.Size {
				sh.sigs = append(sh.sigs, sig)
			} else {
				return sh, fmt.Errorf("%w: v2 is not 64 hex digits", ErrBadSignature)
			}
		}
	}
	return sh, nil
}

// signedNames returns the h= list of signed header names, refusing one
// that is not sorted, distinct and lower-case, and a header of h that must
// be signed (mustSign) but is not in it.
func signedNames(hl string, h http.Header, idHeader string) ([]string, error) {
	var list []string
	if hl != "" {
		list = strings.Split(hl, ";")
	}
	signed := make(map[string]bool, len(list))
	for i, n := range list {
		if n == "" || n != strings.ToLower(n) || (i > 0 && n <= list[i-1]) || strings.EqualFold(n, SignatureHeader) {
			return nil, fmt.Errorf("%w: h= is not a sorted list of distinct lower-case header names", ErrBadSignature)
		}
		signed[n] = true
	}
	for name := range h {
		if n := strings.ToLower(name); !signed[n] && mustSign(n, idHeader) {
			return nil, fmt.Errorf("%w: header %s is not signed", ErrBadSignature, http.CanonicalHeaderKey(name))
		}
	}
	return list, nil
}

// mustSign reports whether the lower-case header name n, when present in a
// request, must be covered by its v2 signature: a header the sender
// derives from the message, or the id header the receiver reads.
func mustSign(n, idHeader string) bool {
	switch {
	case n == "content-type", n == "idempotency-key", strings.EqualFold(n, idHeader),
		strings.HasPrefix(n, "x-message-"), strings.HasPrefix(n, "ce-"):
		return true
	case strings.HasPrefix(n, "walpost-"):
		return n != strings.ToLower(SignatureHeader)
	}
	return false
}
