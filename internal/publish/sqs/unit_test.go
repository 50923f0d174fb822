package sqs

import (
	"strings"
	"testing"

	"github.com/walpost/walpost/internal/publish/sinktest"
)

func TestConfigErrorsNameTheField(t *testing.T) {
	for _, c := range []struct{ doc, want string }{
		{"", "queue: empty"},
		{"queue: a.b", "only a FIFO queue's"},
		{"queue: \"{type}.fifo\"\nmax_message_bytes: 10", "max_message_bytes: 10 is outside"},
		{"queue: q\nendpoint: localhost:9324", "endpoint:"},
		{"queue: https://sqs.eu-central-1.amazonaws.com/1/{type}", "cannot be a template"},
		{"queue: q\nmax_retries: 99", "max_retries: 99"},
		{"queue: q\nsource: /x", "source: only used with format: cloudevents"},
		{"queue: q\nbogus: 1", "bogus"},
	} {
		_, err := New(sinktest.SinkConfig(t, "name: s\nkind: sqs\n"+c.doc), testLogger(t))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want an error naming %q", c.doc, err, c.want)
		}
	}
}
