package webhook

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/walpost/walpost/inbox"
	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish/sinktest"
)

// TestSignatureV2CoversEveryMessageHeader: in mode message (raw and
// cloudevents) and mode batch, the request's v2 signature verifies with
// inbox.VerifyRequest and names every header the sink derives from the
// message (not User-Agent nor headers:); changing any of them, the type
// included, fails; v1 is beside v2 only with signature_v1 (the default).
func TestSignatureV2CoversEveryMessageHeader(t *testing.T) {
	const secret = "s3cret-signing"
	for _, c := range []struct {
		name  string
		extra []string
		v1    bool
	}{
		{"raw", nil, true},
		{"raw, signature_v1 false", []string{"signature_v1: false"}, false},
		{"cloudevents", []string{"format: cloudevents", "signature_v1: false"}, false},
		{"batch", []string{"mode: batch"}, true},
	} {
		rc := newReceiver(t)
		s := newSink(t, rc.srv.URL, append([]string{"secret: '" + secret + "'", "headers: {Authorization: 'Bearer conf'}"}, c.extra...)...)
		m := sinktest.NewGen(91).Message("order-1")
		m.Headers = map[string]string{"traceparent": "00-abc-def-01", "x-tenant": "acme", "Authorization": "Bearer row"}
		if err := s.Publish(sinktest.Context(t, 10*time.Second), []*message.Message{m}); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		r := rc.requests()[0]
		sig := r.header.Get(inbox.SignatureHeader)
		if strings.Contains(sig, ",v1=") != c.v1 || !strings.Contains(sig, ",v2=") {
			t.Errorf("%s: %s = %q, want v2 and v1 %v", c.name, inbox.SignatureHeader, sig, c.v1)
		}
		if a := r.header.Values("Authorization"); len(a) != 1 || a[0] != "Bearer conf" {
			t.Errorf("%s: Authorization %q, want only the configured one", c.name, a)
		}
		signed, err := inbox.VerifyRequest(r.header, r.header.Get(headerIdempotencyKey), r.body, time.Now(), inbox.VerifyOptions{Secrets: [][]byte{[]byte(secret)}})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		for k := range r.header {
			isSigned := signed[k] != nil
			want := k != "User-Agent" && k != "Authorization" && k != inbox.SignatureHeader && k != "Accept-Encoding" && k != "Content-Length"
			if isSigned != want {
				t.Errorf("%s: header %s signed %v, want %v (%s)", c.name, k, isSigned, want, sig)
			}
		}
		for k := range signed {
			h := r.header.Clone()
			h.Set(k, h.Get(k)+"x")
			if _, err := inbox.VerifyRequest(h, h.Get(headerIdempotencyKey), r.body, time.Now(), inbox.VerifyOptions{Secrets: [][]byte{[]byte(secret)}}); !errors.Is(err, inbox.ErrBadSignature) {
				t.Errorf("%s: %s changed: %v, want ErrBadSignature", c.name, k, err)
			}
		}
	}
}
