package tcpproxy

import "net"

// Freeze stops forwarding in both directions without closing anything, as
// when the network between client and server is lost: bytes sent are
// held (then refused once the buffers are full), no FIN or RST passes,
// and new connections are accepted but never reach the server. Each side
// notices only through its own timeouts. Thaw forwards again (what was
// held first); Cut and Close thaw.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.thawed == nil {
		p.thawed = make(chan struct{})
	}
}

// Thaw ends a Freeze.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.thawed != nil {
		close(p.thawed)
		p.thawed = nil
	}
}

// gate writes to conn, waiting while the proxy is frozen.
type gate struct {
	p    *Proxy
	conn net.Conn
}

func (g gate) Write(b []byte) (int, error) {
	for {
		g.p.mu.Lock()
		ch := g.p.thawed
		g.p.mu.Unlock()
		if ch == nil {
			return g.conn.Write(b)
		}
		<-ch
	}
}

// Conns returns how many connections the proxy forwards now (each
// accepted connection counts once, while it is open): a test's evidence
// that a client is mid-request while the proxy is frozen.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns) / 2
}
