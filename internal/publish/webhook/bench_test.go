package webhook

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/walpost/walpost/internal/publish/sinktest"
)

// BenchmarkWebhookPublish measures Publish (sinktest.BenchPublish: calls
// of 1, 100 and 1000 messages of ~300-byte JSON payloads) to a local
// endpoint over loopback HTTP/1.1 that reads each body and answers 200,
// in mode message (one request per message) and mode batch (requests of
// at most 100 messages, the default), signed. ns/op is the latency of a
// call of that size, msgs/s the catch-up throughput.
func BenchmarkWebhookPublish(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "processed\n")
	}))
	b.Cleanup(srv.Close)
	for _, mode := range []string{"message", "batch"} {
		s := newSink(b, srv.URL, "mode: "+mode, "secret: bench")
		for _, batch := range []int{1, 100, 1000} {
			b.Run(fmt.Sprintf("mode=%s/batch=%d", mode, batch), func(b *testing.B) { sinktest.BenchPublish(b, s, batch) })
		}
	}
}
