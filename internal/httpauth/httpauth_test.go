package httpauth

import (
	"net/http/httptest"
	"testing"

	"github.com/walpost/walpost/internal/config"
)

// TestAuthorizedTakesOnlyTheConfiguredCredentials: a bearer token where
// http.auth has one, a user name and password by basic authentication
// where it has those, and nothing else.
func TestAuthorizedTakesOnlyTheConfiguredCredentials(t *testing.T) {
	bearer := &config.HTTPAuth{BearerToken: "tok"}
	basic := &config.HTTPAuth{Username: "ops", Password: "pw"}
	for _, c := range []struct {
		name string
		a    *config.HTTPAuth
		set  func(h map[string][]string)
		want bool
	}{
		{"bearer", bearer, func(h map[string][]string) { h["Authorization"] = []string{"bearer  tok "} }, true},
		{"wrong bearer", bearer, func(h map[string][]string) { h["Authorization"] = []string{"Bearer tok2"} }, false},
		{"empty bearer", bearer, func(h map[string][]string) { h["Authorization"] = []string{"Bearer "} }, false},
		{"basic where a bearer is wanted", bearer, func(h map[string][]string) { h["Authorization"] = []string{"Basic b3BzOnRvaw=="} }, false},
		{"basic", basic, func(h map[string][]string) { h["Authorization"] = []string{"Basic b3BzOnB3"} }, true},       // ops:pw
		{"wrong user", basic, func(h map[string][]string) { h["Authorization"] = []string{"Basic eDpwdw=="} }, false}, // x:pw
		{"bearer where basic is wanted", basic, func(h map[string][]string) { h["Authorization"] = []string{"Bearer pw"} }, false},
		{"none", basic, func(map[string][]string) {}, false},
	} {
		r := httptest.NewRequest("GET", "/metrics", nil)
		c.set(r.Header)
		if got := Authorized(c.a, r); got != c.want {
			t.Errorf("%s: Authorized = %v, want %v", c.name, got, c.want)
		}
	}
}
