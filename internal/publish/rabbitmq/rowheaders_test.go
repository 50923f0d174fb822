package rabbitmq

import (
	"testing"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish/envelope"
)

// TestRowHeadersCannotSetCredentials: a headers column entry that is a
// credential or a connection header (publish.RowHeaderDenied) is left out
// of the AMQP headers, and so are CC and BCC, which RabbitMQ routes by;
// the others pass.
func TestRowHeadersCannotSetCredentials(t *testing.T) {
	env := envelope.Settings{}
	env.SetDefaults()
	m := &message.Message{ID: "id-1", Type: "t", Payload: []byte(`{}`), PayloadJSON: true,
		Headers: map[string]string{"Authorization": "Bearer x", "Set-Cookie": "s=1", "Host": "evil", "BCC": "other-queue", "cc": "q2", "traceparent": "tp"}}
	p := Publishing(m, &env)
	for _, k := range []string{"Authorization", "Set-Cookie", "Host", "BCC", "cc"} {
		if _, ok := p.Headers[k]; ok {
			t.Errorf("header %s reached the AMQP message: %v", k, p.Headers)
		}
	}
	if p.Headers["traceparent"] != "tp" {
		t.Errorf("traceparent was left out: %v", p.Headers)
	}
}
