package natsjs

import (
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish/natsjs/natstest"
	"github.com/walpost/walpost/internal/publish/sinktest"
	"github.com/walpost/walpost/internal/tcpproxy"
)

// target is one test's isolated destination: a stream named after a
// unique prefix, on the subjects "<prefix>.outbox.>", reached through a
// cuttable proxy.
type target struct {
	url    string // the server, direct
	proxy  *tcpproxy.Proxy
	prefix string
	stream string
}

// newTarget creates the test's stream (with cfg's other fields) on the
// server of natstest.Start, and a proxy in front of the server.
func newTarget(t testing.TB, cfg jetstream.StreamConfig) *target {
	t.Helper()
	u := natstest.Start(t)
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	p, err := tcpproxy.New(pu.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	tg := &target{url: u, proxy: p, prefix: natstest.Unique(t)}
	tg.stream = tg.prefix
	cfg.Name = tg.stream
	cfg.Subjects = []string{tg.prefix + ".outbox.>"}
	natstest.CreateStream(t, u, cfg)
	return tg
}

// sink opens a nats sink named "events" on the target's proxy with
// subject "<prefix>.outbox.{type}" and the extra YAML lines given, and
// closes it when the test ends.
func (tg *target) sink(t testing.TB, extra ...string) *Sink {
	t.Helper()
	return newSink(t, fmt.Sprintf("servers: [\"nats://%s\"]\nsubject: %q\n%s",
		tg.proxy.Addr(), tg.prefix+".outbox.{type}", strings.Join(extra, "\n")))
}

// newSink opens a nats sink named "events" from the YAML lines given.
func newSink(t testing.TB, settings string) *Sink {
	t.Helper()
	doc := "name: events\nkind: nats\nack_timeout: 5s\nconnect_timeout: 2s\n" + settings
	s, err := New(sinktest.SinkConfig(t, doc), zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s.(*Sink)
}

// read returns the stream's messages mapped back (asMessage).
func (tg *target) read(t testing.TB) []*message.Message {
	t.Helper()
	var out []*message.Message
	for _, m := range natstest.Read(t, tg.url, tg.stream) {
		out = append(out, asMessage(m))
	}
	return out
}

// asMessage maps a stored message back to the outbox message, as far as
// the raw format carries it: Nats-Msg-Id, Walpost-Type and Walpost-Key
// into ID, Type and Key (no Walpost-Key: a NULL key), the other headers
// but the server's Nats-* into Headers.
func asMessage(m natstest.Msg) *message.Message {
	out := &message.Message{Payload: m.Data}
	for k, vs := range m.Header {
		switch k {
		case HeaderMsgID:
			out.ID = vs[0]
		case HeaderType:
			out.Type = vs[0]
		case HeaderKey:
			out.Key, out.HasKey = vs[0], true
		default:
			if strings.HasPrefix(k, "Nats-") {
				continue // the server's (Nats-Expected-Stream)
			}
			if out.Headers == nil {
				out.Headers = map[string]string{}
			}
			out.Headers[k] = vs[0]
		}
	}
	return out
}
