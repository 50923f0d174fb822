package publish

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/rs/zerolog"
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

// RowHeaderDenied returns why no sink may send the headers column entry
// named name as a header or property (matched without regard to case),
// or "" when it may: credentials (Authorization, Proxy-Authorization,
// Cookie, Set-Cookie, WWW-Authenticate, Proxy-Authenticate) and
// connection headers (Connection, Keep-Alive, Proxy-Connection, TE,
// Trailer, Transfer-Encoding, Upgrade, Host, Content-Length, Expect).
func RowHeaderDenied(name string) string {
	if len(name) > len("proxy-authorization") {
		return ""
	}
	return deniedRowHeaders[strings.ToLower(name)]
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
	droppedRowHeaders.Add(1)
	if _, seen := warnedRowHeaders.LoadOrStore(strings.ToLower(name), true); !seen {
		if l := rowHeaderLog.Load(); l != nil {
			l.Warn().Str("header", name).Str("reason", why).
				Msg("an entry of the outbox headers column was left out: it is " + why +
					", which the headers column may not set (docs/security.md, \"Row headers\"); " +
					"the message is sent without it; further entries of this name are left out without a warning")
		}
	}
	return false
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
