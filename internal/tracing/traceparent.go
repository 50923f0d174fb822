package tracing

import (
	"go.opentelemetry.io/otel/trace"

	"github.com/walpost/walpost/internal/message"
)

// TraceparentHeader is the headers entry that carries a row's W3C trace
// context (outbox.TraceparentHeader).
const TraceparentHeader = "traceparent"

// TracestateHeader is the headers entry that carries its vendor state.
const TracestateHeader = "tracestate"

// Parent returns the span context of m's traceparent header, marked
// remote, and whether m has a valid one. It does not allocate.
func Parent(m *message.Message) (trace.SpanContext, bool) {
	tp, ok := m.Headers[TraceparentHeader]
	if !ok {
		return trace.SpanContext{}, false
	}
	return ParseTraceparent(tp)
}

// ParseTraceparent parses a W3C traceparent
// (version-traceid-parentid-flags): ok is false for anything else, as
// W3C Trace Context requires of a malformed header.
func ParseTraceparent(tp string) (trace.SpanContext, bool) {
	const size = 55
	if len(tp) < size || tp[2] != '-' || tp[35] != '-' || tp[52] != '-' || (len(tp) > size && tp[size] != '-') {
		return trace.SpanContext{}, false
	}
	var ver [1]byte
	var tid trace.TraceID
	var sid trace.SpanID
	var flags [1]byte
	if !unhex(ver[:], tp[0:2]) || ver[0] == 0xff || (ver[0] == 0 && len(tp) != size) ||
		!unhex(tid[:], tp[3:35]) || !unhex(sid[:], tp[36:52]) || !unhex(flags[:], tp[53:55]) {
		return trace.SpanContext{}, false
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid,
		TraceFlags: trace.TraceFlags(flags[0]) & trace.FlagsSampled, Remote: true})
	return sc, sc.IsValid()
}

// unhex decodes the lower-case hex s into dst (len(s) == 2*len(dst)).
func unhex(dst []byte, s string) bool {
	if len(s) != 2*len(dst) {
		return false
	}
	for i := range dst {
		hi, ok1 := nibble(s[2*i])
		lo, ok2 := nibble(s[2*i+1])
		if !ok1 || !ok2 {
			return false
		}
		dst[i] = hi<<4 | lo
	}
	return true
}

func nibble(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}
