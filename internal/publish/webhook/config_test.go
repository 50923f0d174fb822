package webhook

import (
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/sinktest"
)

// TestConfigErrorsNameTheField: every bad setting is refused at
// configuration time with an error that starts at the field.
func TestConfigErrorsNameTheField(t *testing.T) {
	for _, c := range []struct{ doc, want string }{
		{"", "url: empty"},
		{"url: ftp://h/x", "url: the scheme is not http or https"},
		{"url: 'https:///nohost'", "url: no host"},
		{"url: 'http://h/x#frag'", "url: has a #fragment"},
		{"url: 'http://h/%zz'", "url: not a URL"},
		{"url: http://h\nmode: stream", `mode: "stream" is not message or batch`},
		{"url: http://h\nmode: batch\nformat: cloudevents", "mode: batch cannot be used with format: cloudevents"},
		{"url: http://h\nformat: xml", `format: unknown "xml"`},
		{"url: http://h\nsource: /x", "source: only used with format: cloudevents"},
		{"url: http://h\nheaders: {'bad name': x}", `headers: "bad name" is not a header name`},
		{"url: http://h\nheaders: {content-type: text/plain}", "headers.content-type: set by the sink itself"},
		{"url: http://h\nheaders: {X-Message-Id: x}", "headers.X-Message-Id: set by the sink itself"},
		{"url: http://h\nheaders: {ce-id: x}", "headers.ce-id: set by the sink itself"},
		{"url: http://h\nheaders: {Walpost-Signature: x}", "headers.Walpost-Signature: set by the sink itself"},
		{"url: http://h\nheaders: {X-A: '1', x-a: '2'}", "the same header as"},
		{"url: http://h\nheaders: {X-A: ''}", "headers.X-A: empty value"},
		{"url: http://h\nheaders: {X-A: \"a\\nb\"}", "headers.X-A: the value holds a control character"},
		{"url: http://h\ntimeout: 1ms", "timeout: 1ms is outside"},
		{"url: http://h\nmax_retry_after: 2h", "max_retry_after: 2h0m0s is outside"},
		{"url: http://h\nbatch_size: -1", "batch_size: -1 is outside"},
		{"url: http://h\nbatch_bytes: 10", "batch_bytes: 10 is outside"},
		{"url: http://h\ntls: {ca_file: ca.pem}", "tls.ca_file: set, but url is not https"},
		{"url: https://h\ntls: {cert_file: c.pem}", "tls.key_file: empty, but tls.cert_file is set"},
		{"url: https://h\ntls: {ca_file: /nonexistent/ca.pem}", "tls.ca_file: open /nonexistent/ca.pem"},
		{"url: http://h\nbrokers: [x]", "brokers"},
	} {
		doc := "name: hook\nkind: webhook\n" + c.doc
		_, err := New(sinktest.SinkConfig(t, doc), zerolog.Nop())
		if err == nil || !strings.HasPrefix(err.Error(), c.want) && !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: err = %v, want %q", c.doc, err, c.want)
		}
	}
}

// TestConfigDefaults: what an entry with only url: means.
func TestConfigDefaults(t *testing.T) {
	s := newSink(t, "http://127.0.0.1:1/x")
	if s.mode != ModeMessage || s.env.Format != "raw" || s.timeout != 10*time.Second || s.maxRetryAfter != 30*time.Second ||
		s.batchSize != 100 || s.batchBytes != 1<<20 || len(s.secret) != 0 || s.endpoint != "http://127.0.0.1:1" {
		t.Errorf("defaults: mode %s format %s timeout %s max_retry_after %s batch %d/%d secret %d endpoint %s",
			s.mode, s.env.Format, s.timeout, s.maxRetryAfter, s.batchSize, s.batchBytes, len(s.secret), s.endpoint)
	}
	ce := newSink(t, "http://127.0.0.1:1/x", "format: cloudevents")
	if ce.env.Source != "walpost" {
		t.Errorf("cloudevents source %q, want walpost", ce.env.Source)
	}
}

// TestKindIsRegistered: the relay finds kind: webhook.
func TestKindIsRegistered(t *testing.T) {
	if _, err := publish.Prepare(0, sinktest.SinkConfig(t, "{name: h, kind: webhook, url: 'http://h/x'}"), zerolog.Nop()); err != nil {
		t.Fatal(err)
	}
}
