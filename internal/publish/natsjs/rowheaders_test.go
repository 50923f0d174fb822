package natsjs

import (
	"testing"

	"github.com/walpost/walpost/internal/publish/envelope"
)

// TestRowHeadersCannotSetCredentials: a headers column entry that is a
// credential or a connection header (publish.RowHeaderDenied) is left out
// of the NATS message, in any case; the others pass.
func TestRowHeadersCannotSetCredentials(t *testing.T) {
	env := envelope.Settings{}
	env.SetDefaults()
	m := testMessage()
	m.Headers = map[string]string{"Authorization": "Bearer x", "cookie": "s=1", "Connection": "close", "traceparent": "tp"}
	nm, err := natsMsg(m, "s", &env)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"Authorization", "cookie", "Connection"} {
		if _, ok := nm.Header[k]; ok {
			t.Errorf("header %s reached the NATS message: %v", k, nm.Header)
		}
	}
	if nm.Header.Get("traceparent") != "tp" {
		t.Errorf("traceparent was left out: %v", nm.Header)
	}
}
