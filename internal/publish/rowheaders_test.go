package publish

import (
	"bytes"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

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

// TestKeepRowHeaderWarnsOncePerName: the first drop of a name logs one
// warning naming the header and why; later drops of it, in any case, are
// counted without a warning.
func TestKeepRowHeaderWarnsOncePerName(t *testing.T) {
	var buf bytes.Buffer
	setRowHeaderLog(zerolog.New(&buf))
	defer setRowHeaderLog(zerolog.Nop())
	before := DroppedRowHeaders()
	for _, n := range []string{"Proxy-Authenticate", "proxy-authenticate", "PROXY-AUTHENTICATE"} {
		if KeepRowHeader(n) {
			t.Fatalf("KeepRowHeader(%q) = true", n)
		}
	}
	if got := DroppedRowHeaders() - before; got != 3 {
		t.Errorf("%d drops counted, want 3", got)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], `"level":"warn"`) || !strings.Contains(lines[0], `"header":"Proxy-Authenticate"`) ||
		!strings.Contains(lines[0], "a credential") {
		t.Errorf("warnings %q, want one naming Proxy-Authenticate as a credential", lines)
	}
}
