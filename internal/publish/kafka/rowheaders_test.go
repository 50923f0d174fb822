package kafka

import (
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/internal/publish/envelope"
	"github.com/walpost/walpost/internal/publish/sinktest"
)

// TestRowHeadersCannotSetCredentials: a headers column entry that is a
// credential or a connection header (publish.RowHeaderDenied) is left out
// of the record, in both formats; the others pass.
func TestRowHeadersCannotSetCredentials(t *testing.T) {
	m := sinktest.NewGen(52).Message("k")
	m.Headers = map[string]string{"Authorization": "Bearer x", "cookie": "s=1", "Transfer-Encoding": "chunked", "traceparent": "tp"}
	env := envelope.Settings{Format: envelope.CloudEvents}
	env.SetDefaults()
	for _, r := range [][]string{keys(record(m, "t").Headers), keys(cloudEventsRecord(m, "t", &env).Headers)} {
		got := strings.Join(r, " ")
		if strings.Contains(strings.ToLower(got), "authorization") || strings.Contains(got, "cookie") ||
			strings.Contains(got, "Transfer-Encoding") || !strings.Contains(got, "traceparent") {
			t.Errorf("record headers %q, want traceparent and no Authorization, cookie or Transfer-Encoding", got)
		}
	}
}

func keys(hs []kgo.RecordHeader) []string {
	var out []string
	for _, h := range hs {
		out = append(out, h.Key)
	}
	return out
}
