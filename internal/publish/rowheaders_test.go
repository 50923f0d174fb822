package publish

import (
	"bytes"
	"maps"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/message"
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

// TestRowHeaderDeniedReservesWalpostNames: every name starting with
// walpost-, in any case, is the relay's (the claim check's reference
// among them); walpost alone, or a name merely containing it, is not.
func TestRowHeaderDeniedReservesWalpostNames(t *testing.T) {
	for _, n := range []string{"walpost-claim-check", "Walpost-Claim-Check-SHA256", "WALPOST-CLAIM-CHECK-SIZE", "walpost-", "Walpost-Type", "walpost-anything-else-of-any-length-at-all"} {
		if RowHeaderDenied(n) == "" {
			t.Errorf("RowHeaderDenied(%q) = \"\", want a reason", n)
		}
	}
	for _, n := range []string{"walpost", "x-walpost-claim-check", "walpostclaim"} {
		if why := RowHeaderDenied(n); why != "" {
			t.Errorf("RowHeaderDenied(%q) = %q, want \"\"", n, why)
		}
	}
}

// TestDataHeadersLeaveOutARowsWalpostNamesAndAddTheRelays: the headers a
// file line carries are the column's, less its walpost-* entries, plus
// the relay's own; without either the column itself, credentials kept
// (in a body they are data).
func TestDataHeadersLeaveOutARowsWalpostNamesAndAddTheRelays(t *testing.T) {
	m := &message.Message{Headers: map[string]string{"tenant": "a", "Authorization": "x", "walpost-claim-check": "s3://private/payroll.json"},
		ClaimCheck: &message.ClaimRef{Ref: "s3://b/walpost/k", Size: 3, SHA256: "ab"}}
	got := DataHeaders(m)
	want := map[string]string{"tenant": "a", "Authorization": "x", "walpost-claim-check": "s3://b/walpost/k", "walpost-claim-check-size": "3", "walpost-claim-check-sha256": "ab"}
	if !maps.Equal(got, want) {
		t.Fatalf("DataHeaders %v, want %v", got, want)
	}
	if m.Headers["walpost-claim-check"] != "s3://private/payroll.json" {
		t.Fatal("DataHeaders modified the message")
	}
	plain := &message.Message{Headers: map[string]string{"tenant": "a"}}
	if got := DataHeaders(plain); !maps.Equal(got, plain.Headers) {
		t.Fatalf("DataHeaders %v, want the column", got)
	}
}
