package servicebus

import (
	"testing"

	"github.com/walpost/walpost/internal/message"
)

// TestRowHeadersCannotSetCredentials: a headers column entry that is a
// credential or a connection header (publish.RowHeaderDenied) is left out
// of the application properties; the others pass.
func TestRowHeadersCannotSetCredentials(t *testing.T) {
	m := &message.Message{ID: "id-1", Type: "t", Payload: []byte(`{}`), PayloadJSON: true,
		Headers: map[string]string{"Proxy-Authorization": "Basic x", "Cookie": "s=1", "Upgrade": "h2c", "traceparent": "tp"}}
	sm := toMessage(m, false, nil)
	for _, k := range []string{"Proxy-Authorization", "Cookie", "Upgrade"} {
		if _, ok := sm.ApplicationProperties[k]; ok {
			t.Errorf("header %s reached the Service Bus message: %v", k, sm.ApplicationProperties)
		}
	}
	if sm.ApplicationProperties["traceparent"] != "tp" {
		t.Errorf("traceparent was left out: %v", sm.ApplicationProperties)
	}
}
