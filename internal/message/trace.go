package message

// TraceID returns the trace id of the message's W3C traceparent header
// (32 lower-case hex digits), "" when it has none or a malformed one: the
// trace_id field of the log records that name a message (docs/operations.md,
// "Tracing"). It does not allocate.
func (m *Message) TraceID() string {
	tp, ok := m.Headers["traceparent"]
	if !ok || len(tp) < 55 || tp[2] != '-' || tp[35] != '-' || tp[52] != '-' {
		return ""
	}
	id := tp[3:35]
	zero := true
	for i := 0; i < len(id); i++ {
		c := id[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return ""
		}
		zero = zero && c == '0'
	}
	if zero {
		return ""
	}
	return id
}
