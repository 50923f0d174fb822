package main

import (
	"bytes"
	"context"
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
// but never answers makes `cdc init --wait 0` (one attempt; see
// initwait_integration_test.go for the wait) give up after connect_timeout with an
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
	code := run([]string{"init", "--config", cfg, "--wait", "0"}, &out, &out)
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
	if !pgtest.WaitFor(20*time.Second, func() bool { return strings.Count(p.Stderr.String(), "relay restarting") >= 2 }) {
		t.Fatalf("cdc run did not retry:\n%s", p.Stderr.String())
	}
	if p.Exited() {
		t.Fatalf("cdc run gave up:\n%s", p.Stderr.String())
	}
	if code := readyz(listen); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz while not connected: %d, want 503", code)
	}
	logs := p.Stderr.String()
	if !strings.Contains(logs, "host="+host+" port="+port+" database=app user=walpost") || strings.Contains(logs, secret) {
		t.Fatalf("cdc run's log does not name the server, or shows the password:\n%s", logs)
	}
}

// TestIntegrationRunStartsBeforePostgres: `cdc run` started while Postgres
// cannot be reached retries with backoff (not ready meanwhile) instead of
// exiting, and streams once the server is there: start order does not
// matter.
func TestIntegrationRunStartsBeforePostgres(t *testing.T) {
	t.Parallel()
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
	if !pgtest.WaitFor(20*time.Second, func() bool { return strings.Count(p.Stderr.String(), "relay restarting") >= 3 }) {
		t.Fatalf("cdc run did not retry while Postgres was down:\n%s", p.Stderr.String())
	}
	if p.Exited() || readyz(listen) != http.StatusServiceUnavailable {
		t.Fatalf("cdc run exited or was ready while Postgres was down:\n%s", p.Stderr.String())
	}
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	conn := pgtest.Connect(t, url)
	m := relaytest.NewMsg("t", "k", 1)
	ob.InsertTx(t, conn, m)
	relaytest.WaitAllDelivered(t, out, []relaytest.Msg{m}, 60*time.Second, p.Stderr.String)
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

// withHBA puts lines at the top of the server's pg_hba.conf (first match
// wins: lines for the test's own roles change nothing for the others) and
// reloads it; the file is restored when the test ends. It skips the test
// when the file cannot be written (a server of WALPOST_TEST_DATABASE_URL).
func withHBA(t *testing.T, url string, lines ...string) {
	t.Helper()
	conn := pgtest.Connect(t, url)
	var path string
	if err := conn.QueryRow(context.Background(), "SHOW hba_file").Scan(&path); err != nil {
		t.Fatal(err)
	}
	old, err := os.ReadFile(path)
	if err != nil {
		t.Skipf("cannot change pg_hba.conf: %v", err)
	}
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"+string(old)), 0o600); err != nil {
		t.Skipf("cannot change pg_hba.conf: %v", err)
	}
	reload := func() { pgtest.Exec(t, url, "SELECT pg_reload_conf()") }
	t.Cleanup(func() {
		os.WriteFile(path, old, 0o600)
		reload()
	})
	reload()
}

// TestIntegrationRunStopsWhenTheServerRefusesTheRoleOrDatabase: a wrong
// password (SQLSTATE 28P01), a database that does not exist (3D000) and a
// role that does not exist (28000) stop cdc run at start with exit 1 and
// an error saying what to fix, instead of retrying forever as for a
// server that cannot be reached; so does a role refused when the stream
// reconnects (28000: not permitted to log in). The password is never
// printed.
func TestIntegrationRunStopsWhenTheServerRefusesTheRoleOrDatabase(t *testing.T) {
	t.Parallel()
	const right, wrong = "right-Pw-5517", "wrong-Pw-8820"
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	cdcInit(t, ob.Config(t, "  - {name: out, kind: discard}", ""))
	pwRole, goneRole := pgtest.Name(t, "pw"), pgtest.Name(t, "gone")
	pgtest.Exec(t, url, "CREATE ROLE "+pwRole+" SUPERUSER LOGIN PASSWORD '"+right+"'", "CREATE ROLE "+goneRole+" SUPERUSER LOGIN")
	t.Cleanup(func() { pgtest.Exec(t, url, "DROP ROLE IF EXISTS "+pwRole, "DROP ROLE IF EXISTS "+goneRole) })
	withHBA(t, url, "host all "+pwRole+" 127.0.0.1/32 scram-sha-256")

	u := serverAddr(url)
	// lost: how many times the stream lost its connection before (once
	// when it is terminated while running): each logs "reconnecting".
	refused := func(name string, p *proc, sqlstate string, lost int) {
		t.Helper()
		code := p.Wait(30 * time.Second)
		log := p.Stderr.String()
		if code != 1 || !strings.Contains(log, sqlstate) || !strings.Contains(log, "fix the user, password or database of postgres.url") {
			t.Errorf("%s: exit %d, want 1 with SQLSTATE %s and what to fix:\n%s", name, code, sqlstate, log)
		}
		if strings.Contains(log, "retrying") || strings.Contains(log, "relay restarting") || strings.Count(log, "reconnecting") > lost || strings.Contains(log, wrong) {
			t.Errorf("%s: the relay retried, or printed the password:\n%s", name, log)
		}
	}
	run := func(url string) *proc {
		relayOB := ob
		relayOB.URL = url
		return startCDC(t, "run", "--config", relayOB.Config(t, "  - {name: out, kind: discard}", ""))
	}
	for _, c := range []struct{ name, url, want string }{
		{"wrong password", fmt.Sprintf("postgres://%s:%s@%s/postgres", pwRole, wrong, u), "28P01"},
		{"no such database", fmt.Sprintf("postgres://postgres@%s/%s", u, pgtest.Name(t, "nodb")), "3D000"},
		{"no such role", fmt.Sprintf("postgres://%s@%s/postgres", pgtest.Name(t, "norole"), u), "28000"},
	} {
		refused(c.name, run(c.url), c.want, 0)
	}

	// Refused while running: the stream's reconnect meets the refusal.
	p := run(fmt.Sprintf("postgres://%s@%s/postgres", goneRole, u))
	pgtest.Await(t, 60*time.Second, "the relay streams", func() bool { return strings.Contains(p.Stderr.String(), `"message":"streaming"`) })
	pgtest.Exec(t, url, "ALTER ROLE "+goneRole+" NOLOGIN",
		"SELECT pg_terminate_backend(pid) FROM pg_stat_replication WHERE usename = '"+goneRole+"'")
	refused("role refused on reconnect", p, "28000", 1)

	// The right password connects: the refusal was the server's answer
	// to the wrong one, not the setup.
	conn := pgtest.Connect(t, fmt.Sprintf("postgres://%s:%s@%s/postgres", pwRole, right, u))
	conn.Close(context.Background())
}
