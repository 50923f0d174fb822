package console

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/walpost/walpost/internal/httpauth"
)

// Role is what a request may do.
type Role int

const (
	// RoleNone: no valid credentials.
	RoleNone Role = iota
	// RoleView reads (http.view_token).
	RoleView
	// RoleOperate reads and acts (http.operate_token, http.auth, or no
	// credentials configured on a loopback listener).
	RoleOperate
)

func (r Role) String() string {
	switch r {
	case RoleView:
		return "view"
	case RoleOperate:
		return "operate"
	}
	return "none"
}

type roleKey struct{}

// roleOf is the role authenticate found for the request.
func roleOf(r *http.Request) Role {
	role, _ := r.Context().Value(roleKey{}).(Role)
	return role
}

// role reads the request's credentials: a bearer token, or the password
// of basic authentication (any user name), compared in constant time with
// both console tokens; http.auth's credentials act as the operate token.
func (c *Console) role(r *http.Request) Role {
	h := c.http
	if c.open() {
		return RoleOperate // a loopback listener only (config.validateConsole), a local Host (authenticate)
	}
	token := httpauth.Bearer(r)
	if _, pass, basic := r.BasicAuth(); basic {
		token = pass
	}
	if token == "" {
		return RoleNone
	}
	// Every comparison made, whatever the first gives: the time taken
	// does not tell which matched.
	operate := h.OperateToken != "" && httpauth.SameSecret(token, h.OperateToken)
	view := h.ViewToken != "" && httpauth.SameSecret(token, h.ViewToken)
	auth := h.Auth != nil && httpauth.Authorized(h.Auth, r)
	switch {
	case operate || auth:
		return RoleOperate
	case view:
		return RoleView
	}
	return RoleNone
}

// open reports whether the console has no credentials configured (no
// view_token, operate_token or http.auth): allowed on a loopback listen
// only, where every request it answers is the operate role.
func (c *Console) open() bool {
	h := c.http
	return h.ViewToken == "" && h.OperateToken == "" && h.Auth == nil
}

// localHost reports whether hostport, a request's Host or an Origin's
// host, names the console without credentials: the host of http.listen,
// localhost, or a loopback address (any port: a forwarded port keeps the
// name). A page that rebinds its own DNS name to 127.0.0.1 (DNS
// rebinding) sends its own name as the Host, never one of these
// (docs/security.md, "The console without tokens").
func (c *Console) localHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if host == "" {
		return false
	}
	if listen, _, err := net.SplitHostPort(c.http.Listen); err == nil && listen != "" && strings.EqualFold(host, listen) {
		return true
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// errForeignHost is the answer to a request whose Host is not the
// console's without credentials.
const errForeignHost = "forbidden: without http.view_token, http.operate_token or http.auth the console answers only requests " +
	"addressed to http.listen, localhost or a loopback address (a page of another site that resolves its name to this " +
	"machine, DNS rebinding, would be one); open the console at http://127.0.0.1:PORT/console/, or set http.operate_token"

// authenticate answers 401 with a basic challenge (a browser then asks
// for the token as the password) to a request without a role, and
// passes the role on. Without credentials configured it first refuses,
// 403, a request whose Host is not localHost's.
func (c *Console) authenticate(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c.open() && !c.localHost(r.Host) {
			http.Error(w, errForeignHost, http.StatusForbidden)
			return
		}
		role := c.role(r)
		if role == RoleNone {
			w.Header().Set("WWW-Authenticate", `Basic realm="walpost console", charset="UTF-8"`)
			http.Error(w, "unauthorized: give http.view_token or http.operate_token (as a bearer token, or as the password)", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), roleKey{}, role)))
	})
}

// checkPOST refuses an action that is not the operate role's, not JSON,
// from another site, or without the process's CSRF token: the reason,
// and the status to answer; "" when it may go on.
func (c *Console) checkPOST(r *http.Request) (string, int) {
	if roleOf(r) != RoleOperate {
		return "forbidden: the view token reads only; actions need http.operate_token", http.StatusForbidden
	}
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return "forbidden: a request from another site", http.StatusForbidden
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host || c.open() && !c.localHost(u.Host) {
			return "forbidden: a request from another origin", http.StatusForbidden
		}
	}
	if ct, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";"); strings.TrimSpace(ct) != "application/json" {
		return "send the action as JSON (Content-Type: application/json)", http.StatusUnsupportedMediaType
	}
	if !httpauth.SameSecret(r.Header.Get("X-CSRF-Token"), c.csrf) {
		return "forbidden: X-CSRF-Token missing or stale: read csrf_token from GET /api/v1/session (or reload the page)", http.StatusForbidden
	}
	return "", 0
}
