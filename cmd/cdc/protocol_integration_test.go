package main

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/relaytest"
)

// corruptingProxy forwards connections to a PostgreSQL server and cuts
// the first pgoutput Relation message it sees short, as a broken network
// device or server might: the relay must treat it as a protocol error and
// reconnect, not crash.
type corruptingProxy struct {
	ln     net.Listener
	target string
	done   atomic.Bool // one message corrupted
	wg     sync.WaitGroup
}

func newCorruptingProxy(t *testing.T, target string) *corruptingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &corruptingProxy{ln: ln, target: target}
	var conns sync.Map
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			conns.Store(c, up)
			p.wg.Add(2)
			go func() { defer p.wg.Done(); io.Copy(up, c); up.Close() }()
			go func() { defer p.wg.Done(); p.serverToClient(c, up); c.Close() }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		conns.Range(func(k, v any) bool { k.(net.Conn).Close(); v.(net.Conn).Close(); return true })
		p.wg.Wait()
	})
	return p
}

// serverToClient copies backend messages (type byte, int32 length, body),
// truncating the first CopyData that carries an XLogData with a Relation.
func (p *corruptingProxy) serverToClient(dst io.Writer, src io.Reader) {
	head := make([]byte, 5)
	for {
		if _, err := io.ReadFull(src, head); err != nil {
			return
		}
		body := make([]byte, binary.BigEndian.Uint32(head[1:])-4)
		if _, err := io.ReadFull(src, body); err != nil {
			return
		}
		if head[0] == 'd' && len(body) > 26 && body[0] == 'w' && body[25] == 'R' && p.done.CompareAndSwap(false, true) {
			body = body[:25+7] // 'R', the relation id and 2 bytes of its namespace
			binary.BigEndian.PutUint32(head[1:], uint32(len(body)+4))
		}
		if _, err := dst.Write(append(head, body...)); err != nil {
			return
		}
	}
}

// TestIntegrationMalformedProtocolBytesReconnect: a truncated Relation
// message in the stream (it made pglogrepl panic, and the process exit 2,
// the code of configuration errors) is a protocol error: the relay logs
// it, reconnects from the confirmed position and delivers everything.
func TestIntegrationMalformedProtocolBytesReconnect(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	sink := fmt.Sprintf("  - {name: out, kind: file, path: %s}", out)
	cdcInit(t, ob.Config(t, sink, ""))
	pgAddr := serverAddr(url)
	proxy := newCorruptingProxy(t, pgAddr)
	relayOB := ob
	relayOB.URL = strings.Replace(url, pgAddr, proxy.ln.Addr().String(), 1)
	p := startCDC(t, "run", "--config", relayOB.Config(t, sink, ""))

	conn := pgtest.Connect(t, url)
	first := relaytest.NewMsg("t", "k", 1)
	ob.InsertTx(t, conn, first)
	relaytest.WaitAllDelivered(t, out, []relaytest.Msg{first}, 30*time.Second, p.Stderr.String)
	if !proxy.done.Load() {
		t.Fatal("the proxy corrupted nothing: the test did not test")
	}
	second := relaytest.NewMsg("t", "k", 2)
	ob.InsertTx(t, conn, second)
	relaytest.WaitAllDelivered(t, out, []relaytest.Msg{first, second}, 30*time.Second, p.Stderr.String)
	if p.Exited() {
		t.Fatalf("the relay exited\n%s", p.Stderr.String())
	}
	if logs := p.Stderr.String(); !strings.Contains(logs, "malformed pgoutput") || !strings.Contains(logs, "relay restarting") {
		t.Fatalf("the relay did not report the protocol error and restart:\n%s", logs)
	}
}
