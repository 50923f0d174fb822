package webhook

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish/sinktest"
	"github.com/walpost/walpost/internal/tcpproxy"
)

// behindProxy puts a tcpproxy in front of rc, so that an outage can cut
// the endpoint off the network (listener closed, connections reset) and
// restore it on the same address.
func behindProxy(t *testing.T, rc *receiver) (*tcpproxy.Proxy, string) {
	t.Helper()
	p, err := tcpproxy.New(strings.TrimPrefix(rc.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p, "http://" + p.Addr() + "/hooks/walpost"
}

func outage(p *tcpproxy.Proxy) func(t testing.TB) func() {
	return func(t testing.TB) func() {
		p.Cut()
		return func() {
			if err := p.Restore(); err != nil {
				t.Errorf("restoring the proxy: %v", err)
			}
		}
	}
}

// noRefusal is why the webhook runs skip the refusal subtest.
const noRefusal = "a webhook sink posts to one url: there is no second destination for a key's messages to overtake its parked head on"

// TestIntegrationConformanceMessageMode runs the sink conformance suite
// with one request per message, format raw: what the receiver reads
// back from each request's headers and body is the message. The outage
// cuts the endpoint off the network and restores it on the same address.
func TestIntegrationConformanceMessageMode(t *testing.T) {
	sinktest.Run(t, sinktest.Harness{
		NoRefusal: noRefusal,
		Open: func(t *testing.T) *sinktest.Target {
			rc := newReceiver(t)
			p, u := behindProxy(t, rc)
			s := newSink(t, u, "timeout: 2s", "headers: {X-Static: yes}")
			return &sinktest.Target{
				Sink: s,
				Read: func(testing.TB) []*message.Message {
					var msgs []*message.Message
					for _, r := range rc.requests() {
						msgs = append(msgs, rawMessage(r))
					}
					return msgs
				},
				Outage: outage(p),
			}
		},
		Features: sinktest.Features{GlobalOrder: true, NullKey: true, BinaryPayload: true, MaxPayload: 4 << 20},
	})
}

// TestIntegrationConformanceBatchMode runs the suite with JSON-array
// requests of at most 7 messages and 4 KiB, so that every Publish call
// goes out in many requests, one after another.
func TestIntegrationConformanceBatchMode(t *testing.T) {
	sinktest.Run(t, sinktest.Harness{
		NoRefusal: noRefusal,
		Open: func(t *testing.T) *sinktest.Target {
			rc := newReceiver(t)
			p, u := behindProxy(t, rc)
			s := newSink(t, u, "mode: batch", "batch_size: 7", "batch_bytes: 4096", "timeout: 2s")
			return &sinktest.Target{
				Sink: s,
				Read: func(t testing.TB) []*message.Message {
					var msgs []*message.Message
					for _, r := range rc.requests() {
						msgs = append(msgs, batchMessages(t, r)...)
					}
					return msgs
				},
				Outage: outage(p),
			}
		},
		Features: sinktest.Features{GlobalOrder: true, NullKey: true, LSN: true, BinaryPayload: true,
			ReencodesJSON: true, MaxPayload: 1 << 20},
	})
}

// ceMessage decodes a request of format cloudevents with the CloudEvents
// Go SDK's HTTP binding, as a receiver using the SDK reads it, back into
// the message it carries. The SDK (v2.16) does not percent-decode header
// values as the HTTP binding says receivers must; the partition key is
// decoded here.
func ceMessage(t testing.TB, r request) *message.Message {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(r.body))
	req.Header = r.header.Clone()
	ev, err := cehttp.NewEventFromHTTPRequest(req)
	if err != nil {
		t.Fatalf("the CloudEvents SDK cannot read the request: %v", err)
	}
	if err := ev.Validate(); err != nil {
		t.Errorf("event %s does not validate: %v", ev.ID(), err)
	}
	m := &message.Message{
		ID:          ev.ID(),
		Type:        ev.Type(),
		Payload:     ev.Data(),
		PayloadJSON: ev.DataContentType() == "application/json",
		CommitTime:  ev.Time(),
		Headers:     map[string]string{},
	}
	if pk, ok := ev.Extensions()["partitionkey"].(string); ok {
		if m.Key, err = url.PathUnescape(pk); err != nil {
			t.Errorf("partitionkey %q: %v", pk, err)
		}
		m.HasKey = true
	}
	for k, v := range columnHeaders(r.header) {
		if k != strings.ToLower(headerID) && k != strings.ToLower(headerIdempotencyKey) {
			m.Headers[k] = v
		}
	}
	return m
}

// TestIntegrationConformanceCloudEvents runs the suite with format
// cloudevents, reading every request back with the CloudEvents SDK: id,
// type, commit time, key (ce-partitionkey), payload as data and its
// content type, and the headers column as plain headers.
func TestIntegrationConformanceCloudEvents(t *testing.T) {
	sinktest.Run(t, sinktest.Harness{
		NoRefusal: noRefusal,
		Open: func(t *testing.T) *sinktest.Target {
			rc := newReceiver(t)
			p, u := behindProxy(t, rc)
			s := newSink(t, u, "format: cloudevents", "source: /orders", "timeout: 2s")
			return &sinktest.Target{
				Sink: s,
				Read: func(t testing.TB) []*message.Message {
					var msgs []*message.Message
					for _, r := range rc.requests() {
						msgs = append(msgs, ceMessage(t, r))
					}
					return msgs
				},
				Outage: outage(p),
			}
		},
		Features: sinktest.Features{GlobalOrder: true, NullKey: true, CommitTime: time.Nanosecond,
			BinaryPayload: true, MaxPayload: 1 << 20},
	})
}

// TestIntegrationCloudEventsAttributesAsTheSDKReadsThem checks each
// attribute the SDK decodes: specversion, id, source, type, time,
// datacontenttype and data, for a JSON and a binary payload, with and
// without a key.
func TestIntegrationCloudEventsAttributesAsTheSDKReadsThem(t *testing.T) {
	rc := newReceiver(t)
	s := newSink(t, rc.srv.URL, "format: cloudevents", "source: urn:example:orders")
	g := sinktest.NewGen(71)
	js, null, bin := g.Message("order-1"), g.NullKeyMessage(), g.Message("order-2")
	bin.Payload, bin.PayloadJSON = []byte{0, 1, 2, 0xff}, false
	msgs := []*message.Message{js, null, bin}
	if err := s.Publish(sinktest.Context(t, 10*time.Second), msgs); err != nil {
		t.Fatal(err)
	}
	reqs := rc.requests()
	if len(reqs) != len(msgs) {
		t.Fatalf("%d requests, want %d", len(reqs), len(msgs))
	}
	for i, m := range msgs {
		req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(reqs[i].body))
		req.Header = reqs[i].header
		ev, err := cehttp.NewEventFromHTTPRequest(req)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		wantCT := map[bool]string{true: "application/json", false: "application/octet-stream"}[m.PayloadJSON]
		for _, c := range []struct{ what, got, want string }{
			{"specversion", ev.SpecVersion(), "1.0"},
			{"id", ev.ID(), m.ID},
			{"source", ev.Source(), "urn:example:orders"},
			{"type", ev.Type(), m.Type},
			{"time", ev.Time().Format(time.RFC3339Nano), m.CommitTime.UTC().Format(time.RFC3339Nano)},
			{"datacontenttype", ev.DataContentType(), wantCT},
			{"data", string(ev.Data()), string(m.Payload)},
			{"Idempotency-Key", reqs[i].header.Get(headerIdempotencyKey), m.ID},
		} {
			if c.got != c.want {
				t.Errorf("message %d: %s %q, want %q", i, c.what, c.got, c.want)
			}
		}
		pk, hasKey := ev.Extensions()["partitionkey"]
		if hasKey != m.HasKey || (m.HasKey && pk != m.Key) {
			t.Errorf("message %d: partitionkey %v (%v), want %q (%v)", i, pk, hasKey, m.Key, m.HasKey)
		}
	}
}

// TestCloudEventsValuesArePercentEncoded: the HTTP binding requires
// space, double quote, percent and bytes outside printable ASCII to be
// percent-encoded in ce- headers.
func TestCloudEventsValuesArePercentEncoded(t *testing.T) {
	for in, want := range map[string]string{
		"order.created":             "order.created",
		"2026-01-02T03:04:05.1Z":    "2026-01-02T03:04:05.1Z",
		`kunde/äöü 1 "x" 100%`:      "kunde/%C3%A4%C3%B6%C3%BC%201%20%22x%22%20100%25",
		"tab\there\x7f":             "tab%09here%7F",
		"urn:example:orders?a=b&c~": "urn:example:orders?a=b&c~",
	} {
		if got := ceEncode(in); got != want {
			t.Errorf("ceEncode(%q) = %q, want %q", in, got, want)
		}
		if dec, err := url.PathUnescape(ceEncode(in)); err != nil || dec != in {
			t.Errorf("percent-decoding ceEncode(%q) gives %q, %v", in, dec, err)
		}
	}
}
