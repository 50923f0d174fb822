package config

import (
	"slices"
	"strings"
	"testing"
)

// TestConsoleTokensAreCheckedAndSecret: http.console on a listener that
// is not loopback needs an operate token; tokens are long enough, differ,
// come only with the console, are secrets, and no error quotes them.
func TestConsoleTokensAreCheckedAndSecret(t *testing.T) {
	const view, operate = "view-0123456789abcdef", "operate-0123456789abcdef"
	for _, tc := range []struct {
		http, field string // field "": valid
	}{
		{"http: {listen: '127.0.0.1:9187', console: true}", ""},
		{"http: {listen: 'localhost:9187', console: true}", ""},
		{"http: {listen: ':9187', console: true, view_token: " + view + ", operate_token: " + operate + "}", ""},
		{"http: {listen: ':9187', console: true, auth: {bearer_token: " + operate + "}}", ""},
		{"http: {listen: ':9187', console: true}", "http.operate_token"},
		{"http: {listen: '0.0.0.0:9187', console: true, view_token: " + view + "}", "http.operate_token"},
		{"http: {listen: '127.0.0.1:9187', console: true, operate_token: short}", "http.operate_token"},
		{"http: {listen: '127.0.0.1:9187', console: true, view_token: " + operate + ", operate_token: " + operate + "}", "http.view_token"},
		{"http: {listen: '127.0.0.1:9187', view_token: " + view + "}", "http.view_token"},
		{"http: {console: true}", "http.console"},
	} {
		c, err := Parse([]byte(minimal+tc.http+"\n"), env(nil))
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%s: %v", tc.http, err)
		case tc.field != "" && err == nil:
			t.Errorf("%s: no error, want one naming %s", tc.http, tc.field)
		case tc.field != "" && !strings.Contains(err.Error(), tc.field):
			t.Errorf("%s: %v, want it to name %s", tc.http, err, tc.field)
		case err != nil && (strings.Contains(err.Error(), operate) || strings.Contains(err.Error(), view)):
			t.Errorf("%s: the error quotes a token: %v", tc.http, err)
		case err == nil && tc.field == "" && strings.Contains(tc.http, "view_token"):
			if s := c.Secrets(); !slices.Contains(s, view) || !slices.Contains(s, operate) {
				t.Errorf("Secrets() = %q, want both console tokens", s)
			}
		}
	}
}
