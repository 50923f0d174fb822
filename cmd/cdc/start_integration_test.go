package main

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/relaytest"
	"github.com/walpost/walpost/internal/tcpproxy"
)

// blackhole accepts TCP connections and never answers.
func blackhole(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		l.Close()
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().String()
}

func readyz(addr string) int {
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestIntegrationServerThatNeverAnswersTimesOut: a server that accepts TCP
// but never answers makes `cdc init` give up after connect_timeout with an
// error naming host, port, database and user (never the password), and
// `cdc run` log where it connects, retry, and stay not ready.
func TestIntegrationServerThatNeverAnswersTimesOut(t *testing.T) {
	addr := blackhole(t)
	dir := t.TempDir()
	const secret = "s3cr3t-Pw"
	write := func(name, url, extra string) string {
		p := filepath.Join(dir, name)
		writeFile(t, p, fmt.Sprintf("postgres: {url: '%s'}\nsinks: [{name: out, kind: discard}]\n%s", url, extra))
		return p
	}
	cfg := write("init.yaml", "postgres://walpost:"+secret+"@"+addr+"/app?sslmode=disable&connect_timeout=1", "")
	var out bytes.Buffer
	start := time.Now()
	code := run([]string{"init", "--config", cfg}, &out, &out)
	if code != 1 || time.Since(start) > 10*time.Second {
		t.Fatalf("cdc init: exit %d after %v: %s", code, time.Since(start), out.String())
	}
	host, port, _ := net.SplitHostPort(addr)
	for _, want := range []string{"host=" + host, "port=" + port, "database=app", "user=walpost"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("cdc init's error lacks %q: %s", want, out.String())
		}
	}
	if strings.Contains(out.String(), secret) {
		t.Fatalf("cdc init printed the password: %s", out.String())
	}

	httpPort, _ := pgtest.FreePort()
	listen := fmt.Sprintf("127.0.0.1:%d", httpPort)
	p := startCDC(t, "run", "--config", write("run.yaml", "postgres://walpost:"+secret+"@"+addr+"/app?sslmode=disable&connect_timeout=1",
		"http: {listen: '"+listen+"'}\nlog: {level: info}\n"))
	if !pgtest.WaitFor(20*time.Second, func() bool { return strings.Count(p.stderr.String(), "relay restarting") >= 2 }) {
		t.Fatalf("cdc run did not retry:\n%s", p.stderr.String())
	}
	if p.exited() {
		t.Fatalf("cdc run gave up:\n%s", p.stderr.String())
	}
	if code := readyz(listen); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz while not connected: %d, want 503", code)
	}
	logs := p.stderr.String()
	if !strings.Contains(logs, "host="+host+" port="+port+" database=app user=walpost") || strings.Contains(logs, secret) {
		t.Fatalf("cdc run's log does not name the server, or shows the password:\n%s", logs)
	}
}

// TestIntegrationRunStartsBeforePostgres: `cdc run` started while Postgres
// cannot be reached retries with backoff (not ready meanwhile) instead of
// exiting, and streams once the server is there: start order does not
// matter.
func TestIntegrationRunStartsBeforePostgres(t *testing.T) {
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	cfg := ob.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s}", out), "")
	cdcInit(t, cfg)

	pgAddr := serverAddr(url)
	proxy, err := tcpproxy.New(pgAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	proxy.Cut()
	httpPort, _ := pgtest.FreePort()
	listen := fmt.Sprintf("127.0.0.1:%d", httpPort)
	ob.URL = strings.Replace(url, pgAddr, proxy.Addr(), 1)
	cfg = ob.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s}", out), "http: {listen: '"+listen+"'}")
	p := startCDC(t, "run", "--config", cfg)
	if !pgtest.WaitFor(20*time.Second, func() bool { return strings.Count(p.stderr.String(), "relay restarting") >= 3 }) {
		t.Fatalf("cdc run did not retry while Postgres was down:\n%s", p.stderr.String())
	}
	if p.exited() || readyz(listen) != http.StatusServiceUnavailable {
		t.Fatalf("cdc run exited or was ready while Postgres was down:\n%s", p.stderr.String())
	}
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	conn := pgtest.Connect(t, url)
	m := relaytest.NewMsg("t", "k", 1)
	ob.InsertTx(t, conn, m)
	relaytest.WaitAllDelivered(t, out, []relaytest.Msg{m}, 60*time.Second, p.stderr.String)
	if code := readyz(listen); code != http.StatusOK {
		t.Errorf("/readyz while streaming: %d, want 200", code)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
