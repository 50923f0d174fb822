// Package httpauth checks the credentials of a request to cdc's HTTP
// listener: http.auth's, which guard /metrics and /debug/pprof/ (cmd/cdc)
// and act as the console's operate token, and the console's own tokens
// (internal/console). Both compare them here alike, in constant time
// (docs/security.md).
package httpauth

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/walpost/walpost/internal/config"
)

// SameSecret compares in constant time. It compares SHA-256 digests, so
// that neither the time nor an early exit on a length mismatch tells how
// long the secret is.
func SameSecret(got, want string) bool {
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(g[:], w[:]) == 1
}

// Bearer is the token of r's Authorization: Bearer header, "" without one.
func Bearer(r *http.Request) string {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

// Authorized reports whether r carries a's credentials (http.auth): its
// bearer token when it has one, its user name and password by basic
// authentication otherwise.
func Authorized(a *config.HTTPAuth, r *http.Request) bool {
	if a.BearerToken != "" {
		return SameSecret(Bearer(r), a.BearerToken)
	}
	user, pass, ok := r.BasicAuth()
	// Both compared, whatever the first gives: the time taken does not
	// tell which was wrong.
	userOK, passOK := SameSecret(user, a.Username), SameSecret(pass, a.Password)
	return ok && userOK && passOK
}
