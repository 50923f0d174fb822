// Package console is the operator's console of cdc run (issue 37,
// docs/operations.md "Console"): a server-rendered page at /console/ and
// the same data and actions as JSON under /api/v1/, on the process's HTTP
// listener, on with http.console.
//
// What it shows and does is internal/ops, as cdc status and cdc
// dead-letter (one Room a request: the status and parked views, the
// actions under the same rules), plus what only the process knows: its
// metrics (each sink's published count and rate, how long the slot has
// stalled) and the slot's lag history it samples itself, kept in memory
// for an hour (history.go).
//
// Access (auth.go): a request carries http.view_token (read only),
// http.operate_token or http.auth's credentials (read and act); with
// none of them configured (a loopback listener only, config.validate)
// every request may act. Every action is a POST that carries the
// process's CSRF token in X-CSRF-Token, as JSON, from the same origin;
// nothing changes on a GET. Each action is logged with the role and the
// remote address, never a token.
//
// A Console is safe for concurrent use; its actions run one at a time.
package console
