package rabbitmq

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish/sinktest"
)

// asMessage maps a delivery back to the message it was made from, as far
// as RabbitMQ carries it: message_id and type into ID and Type, the "key"
// header into Key (HasKey when present), the other headers into Headers,
// the body into Payload, the timestamp into CommitTime.
func asMessage(t testing.TB, d amqp.Delivery) *message.Message {
	t.Helper()
	m := &message.Message{ID: d.MessageId, Type: d.Type, Payload: d.Body, CommitTime: d.Timestamp,
		PayloadJSON: d.ContentType == "application/json"}
	for k, v := range d.Headers {
		s, ok := v.(string)
		if !ok {
			t.Fatalf("message %s: header %q is a %T, want a string", d.MessageId, k, v)
		}
		if k == HeaderKey {
			m.Key, m.HasKey = s, true
			continue
		}
		if m.Headers == nil {
			m.Headers = map[string]string{}
		}
		m.Headers[k] = s
	}
	return m
}

// newSink opens a rabbitmq sink named "events" with url and exchange set
// and the extra YAML lines given, and closes it when the test ends.
func newSink(t testing.TB, url, exchange string, extra ...string) *Sink {
	t.Helper()
	settings := strings.Join(extra, "\n")
	if !strings.Contains(settings, "timeout:") {
		settings += "\ntimeout: 5s"
	}
	doc := fmt.Sprintf("name: events\nkind: rabbitmq\nurl: %q\nexchange: %q\n%s", url, exchange, settings)
	s, err := New(sinktest.SinkConfig(t, doc), zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s.(*Sink)
}

// proxyURL is the guest URL of the server behind a proxy listening on addr.
func proxyURL(addr string) string { return "amqp://guest:guest@" + addr + "/" }

// stallProxy forwards TCP connections to a server and can hold back the
// bytes of either direction without closing anything: Stall holds the
// server's (the client's publishes reach RabbitMQ, its confirms do not
// come back), StallUp the client's (the proxy stops reading, so the
// client's writes block once the socket buffers are full, as when
// RabbitMQ blocks a connection).
type stallProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	down  chan struct{} // closed while the server's bytes flow
	up    chan struct{} // closed while the client's bytes flow
	done  chan struct{} // closed at cleanup
	conns []net.Conn
}

func newStallProxy(t testing.TB, target string) *stallProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{ln: ln, target: target, down: make(chan struct{}), up: make(chan struct{}), done: make(chan struct{})}
	close(p.down)
	close(p.up)
	go p.accept()
	t.Cleanup(func() {
		ln.Close()
		close(p.done)
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
	})
	return p
}

func (p *stallProxy) Addr() string { return p.ln.Addr().String() }

// Stall holds back the server's bytes until Resume.
func (p *stallProxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = make(chan struct{})
}

// StallUp stops reading the client's bytes until Resume.
func (p *stallProxy) StallUp() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.up = make(chan struct{})
}

// Resume lets the bytes of both directions through again.
func (p *stallProxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, g := range []chan struct{}{p.down, p.up} {
		select {
		case <-g:
		default:
			close(g)
		}
	}
}

func (p *stallProxy) gate(up bool) chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if up {
		return p.up
	}
	return p.down
}

func (p *stallProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		go p.pipe(up, c, true)
		go p.pipe(c, up, false)
	}
}

// pipe copies src to dst, each chunk read waiting at the gate of its
// direction before it is written (and the next read).
func (p *stallProxy) pipe(dst, src net.Conn, up bool) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			select {
			case <-p.gate(up):
			case <-p.done:
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
