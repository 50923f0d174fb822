package publish

import "testing"

// TestRowHeaderDenied: credentials and connection headers are denied in
// any case; trace context, tenants and other names pass.
func TestRowHeaderDenied(t *testing.T) {
	for _, n := range []string{"Authorization", "authorization", "AUTHORIZATION", "Proxy-Authorization", "Cookie", "set-cookie",
		"WWW-Authenticate", "Proxy-Authenticate", "Connection", "Keep-Alive", "Proxy-Connection", "TE", "Trailer",
		"Transfer-Encoding", "Upgrade", "Host", "Content-Length", "Expect"} {
		if RowHeaderDenied(n) == "" {
			t.Errorf("RowHeaderDenied(%q) = \"\", want a reason", n)
		}
	}
	for _, n := range []string{"traceparent", "tracestate", "x-tenant", "correlation_id", "Authorization2", "X-Authorization-Hint", "baggage", ""} {
		if why := RowHeaderDenied(n); why != "" {
			t.Errorf("RowHeaderDenied(%q) = %q, want \"\"", n, why)
		}
	}
	before := DroppedRowHeaders()
	if KeepRowHeader("Cookie") || !KeepRowHeader("traceparent") || DroppedRowHeaders() != before+1 {
		t.Errorf("KeepRowHeader: Cookie kept or traceparent dropped, or the drop not counted (%d → %d)", before, DroppedRowHeaders())
	}
}
