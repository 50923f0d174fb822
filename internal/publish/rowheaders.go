package publish

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/message"
)

// The shared rule for the outbox headers column (docs/security.md, "Row
// headers"): whatever the sink, an entry of the column never becomes a
// header or property that carries credentials or belongs to the
// connection. The column is written by the application, often from
// request data (a trace context, a tenant), so it must not be able to
// authenticate the relay's request to an endpoint, set a cookie or
// reshape the HTTP framing. Each sink also leaves out the names it sets
// itself (its id, type, key, signature and CloudEvents headers: see the
// sink's doc); the file and stdout sinks and the webhook's mode batch
// carry the column as data, in the body, and are not concerned.

// deniedRowHeaders are the names (lower case) no sink sends from the
// headers column, and why.
var deniedRowHeaders = map[string]string{
	// credentials
	"authorization":       "a credential",
	"proxy-authorization": "a credential",
	"cookie":              "a credential",
	"set-cookie":          "a credential",
	"www-authenticate":    "a credential",
	"proxy-authenticate":  "a credential",
	// hop-by-hop and framing: the connection's, not the message's
	"connection":        "a connection header",
	"keep-alive":        "a connection header",
	"proxy-connection":  "a connection header",
	"te":                "a connection header",
	"trailer":           "a connection header",
	"transfer-encoding": "a connection header",
	"upgrade":           "a connection header",
	"host":              "a connection header",
	"content-length":    "a connection header",
	"expect":            "a connection header",
}

// reservedRowHeader is why a walpost-* entry is left out.
const reservedRowHeader = "a name reserved for the relay's own headers (walpost-*)"

// RowHeaderDenied returns why no sink may send the headers column entry
// named name as a header or property (matched without regard to case),
// or "" when it may: credentials (Authorization, Proxy-Authorization,
// Cookie, Set-Cookie, WWW-Authenticate, Proxy-Authenticate), connection
// headers (Connection, Keep-Alive, Proxy-Connection, TE, Trailer,
// Transfer-Encoding, Upgrade, Host, Content-Length, Expect) and every
// name starting with walpost- (message.ReservedPrefix): the relay's own
// headers, such as the claim check's reference, which the relay carries
// apart from the row (message.RelayHeaders) so that a row cannot set
// them.
func RowHeaderDenied(name string) string {
	if relayName(name) {
		return reservedRowHeader
	}
	if len(name) > len("proxy-authorization") {
		return ""
	}
	return deniedRowHeaders[strings.ToLower(name)]
}

// relayName reports whether name starts with walpost- in any case.
func relayName(name string) bool {
	n := len(message.ReservedPrefix)
	return len(name) >= n && strings.EqualFold(name[:n], message.ReservedPrefix)
}

// KeepRowHeader reports whether a sink may send the headers column entry
// named name (RowHeaderDenied is ""). A denied entry is left out and the
// message goes without it: the first time a name is dropped in this
// process, a warning names it (never its value); DroppedRowHeaders
// counts every drop. It is safe for concurrent use.
func KeepRowHeader(name string) bool {
	why := RowHeaderDenied(name)
	if why == "" {
		return true
	}
	LeaveOutRowHeader(name, why)
	return false
}

// LeaveOutRowHeader counts a headers column entry a sink leaves out
// because it is why (a name the broker acts on, or one the sink sets
// itself: the sink's doc lists them), in DroppedRowHeaders, and warns the
// first time a name is left out in this process (never its value). It is
// safe for concurrent use.
func LeaveOutRowHeader(name, why string) {
	droppedRowHeaders.Add(1)
	if _, seen := warnedRowHeaders.LoadOrStore(strings.ToLower(name), true); !seen {
		if l := rowHeaderLog.Load(); l != nil {
			l.Warn().Str("header", name).Str("reason", why).
				Msg("an entry of the outbox headers column was left out: it is " + why +
					", which the headers column may not set (docs/security.md, \"Row headers\"); " +
					"the message is sent without it; further entries of this name are left out without a warning")
		}
	}
}

// DroppedRowHeaders returns how many headers column entries KeepRowHeader
// left out since the process started.
func DroppedRowHeaders() uint64 { return droppedRowHeaders.Load() }

var (
	droppedRowHeaders atomic.Uint64
	warnedRowHeaders  sync.Map // lower-case name → true, once warned
	rowHeaderLog      atomic.Pointer[zerolog.Logger]
)

// setRowHeaderLog makes log the logger of KeepRowHeader's warnings.
func setRowHeaderLog(log zerolog.Logger) { rowHeaderLog.Store(&log) }

// Why a sink leaves out a headers column entry of a name it sets itself,
// or one its broker acts on, for LeaveOutRowHeader.
const (
	OwnRowHeader    = "a name the sink sets itself"
	BrokerRowHeader = "a name the broker acts on"
)

// DataHeaders returns the headers a sink that carries them as data (in
// the body: file, stdout, a webhook's mode batch, CloudEvents structured
// mode) writes for m: the headers column with every walpost-* entry left
// out (LeaveOutRowHeader), then the relay's own headers
// (message.RelayHeaders). Credentials and connection headers stay: in the
// body they are data, not a header of any request. It returns m.Headers
// itself when there is nothing to leave out or add; the result is not to
// be modified.
func DataHeaders(m *message.Message) map[string]string {
	relay := m.RelayHeaders()
	reserved := 0
	for k := range m.Headers {
		if relayName(k) {
			reserved++
		}
	}
	if reserved == 0 && len(relay) == 0 {
		return m.Headers
	}
	out := make(map[string]string, len(m.Headers)-reserved+len(relay))
	for k, v := range m.Headers {
		if relayName(k) {
			LeaveOutRowHeader(k, reservedRowHeader)
			continue
		}
		out[k] = v
	}
	for _, h := range relay {
		out[h.Name] = h.Value
	}
	return out
}
