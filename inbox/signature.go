package inbox

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// SignatureHeader is the request header in which walpost's webhook sink
// signs each request when its `secret:` is set (docs/sinks/webhook.md):
//
//	Walpost-Signature: t=1767225600,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd
//
// t is the time of sending in Unix seconds and v1 the lower-case hex
// HMAC-SHA256, keyed with the shared secret, of
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
// newline ends it without ambiguity.
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
)

// Sign returns the SignatureHeader value of a request with idempotency
// key key and body body, sent at t, signed with secret (see
// SignatureHeader). The webhook sink signs with it; tests of a receiver
// can too.
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

// VerifySignature checks header, a SignatureHeader value, against the
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
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || ts[0] == '+' || ts[0] == '-' {
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
