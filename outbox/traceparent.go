package outbox

import (
	"context"
	"fmt"
)

// TraceparentHeader is the header key under which Enqueue stores the W3C
// traceparent. The relay copies headers onto the broker message, so the
// receiver can continue the trace.
const TraceparentHeader = "traceparent"

type traceparentKey struct{}

// ContextWithTraceparent returns a copy of ctx carrying the W3C traceparent
// tp, which Enqueue then stores in the message's headers.
//
// A tp that is not a valid traceparent (see ValidateTraceparent) is ignored
// and ctx is returned unchanged, as W3C Trace Context requires of a party
// that receives a malformed traceparent: a bad incoming header must not make
// the business transaction fail. Check it yourself with ValidateTraceparent
// when you want to know.
func ContextWithTraceparent(ctx context.Context, tp string) context.Context {
	if ValidateTraceparent(tp) != nil {
		return ctx
	}
	return context.WithValue(ctx, traceparentKey{}, tp)
}

// TraceparentFromContext returns the traceparent stored by
// ContextWithTraceparent, or "" when there is none.
func TraceparentFromContext(ctx context.Context) string {
	tp, _ := ctx.Value(traceparentKey{}).(string)
	return tp
}

// ValidateTraceparent checks that tp has the W3C Trace Context format
// version-traceid-parentid-flags: "00-" + 32 lower-case hex digits (not all
// zero) + "-" + 16 lower-case hex digits (not all zero) + "-" + 2 hex
// digits, e.g. "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".
// Version ff is invalid; a version above 00 may carry more fields after a
// further "-". The error wraps ErrInvalidTraceparent and says what is wrong.
func ValidateTraceparent(tp string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w %q: %s", ErrInvalidTraceparent, tp, why)
	}
	const size = 55 // 2 + 1 + 32 + 1 + 16 + 1 + 2
	if len(tp) < size {
		return bad("too short (want version-traceid-parentid-flags, 55 characters)")
	}
	if tp[2] != '-' || tp[35] != '-' || tp[52] != '-' {
		return bad("fields must be separated by '-' (want version-traceid-parentid-flags)")
	}
	version, traceID, parentID, flags := tp[0:2], tp[3:35], tp[36:52], tp[53:55]
	for _, f := range []struct{ name, v string }{
		{"version", version}, {"trace-id", traceID}, {"parent-id", parentID}, {"trace-flags", flags},
	} {
		if !isLowerHex(f.v) {
			return bad(f.name + " must be lower-case hex")
		}
	}
	switch {
	case version == "ff":
		return bad("version ff is invalid")
	case version == "00" && len(tp) != size:
		return bad("version 00 must be exactly 55 characters")
	case len(tp) > size && tp[size] != '-':
		return bad("extra fields must follow a '-'")
	case traceID == "00000000000000000000000000000000":
		return bad("trace-id is all zeros")
	case parentID == "0000000000000000":
		return bad("parent-id is all zeros")
	}
	return nil
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
