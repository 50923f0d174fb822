// Package sbfake runs a small AMQP 1.0 stand-in for Azure Service Bus for
// tests: testdata/server.js, a few hundred lines of JavaScript on the rhea
// AMQP library, run by Node.js, behind a TCP proxy that a test can cut to
// simulate an outage.
//
// It is a test fixture, not a Service Bus emulator: it implements what the
// Go SDK (azservicebus) does to send (single messages and batches), to
// receive in peek-lock mode (complete, abandon, lock expiry) and to peek,
// with claims-based auth that always succeeds unless a queue is created
// Unauthorized, and scheduled enqueue time and time to live as the SDK
// sends them on a message. Topics, subscriptions, session receivers and
// most management operations are missing. See server.js for the details.
// Tests that need the real service run against a namespace or the official
// emulator instead (the servicebus package's tests do when
// WALPOST_TEST_SERVICEBUS_CONNECTION_STRING is set).
//
// The stand-in needs node and npm on PATH: Start installs rhea into
// testdata/node_modules with npm ci (once per machine, under a file lock)
// and skips the test when either tool is missing.
package sbfake

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/walpost/walpost/internal/tcpproxy"
	"github.com/walpost/walpost/internal/testutil"
)

// rheaVersion is the version of rhea that package-lock.json pins.
const rheaVersion = "3.0.5"

// Broker is a running stand-in. Its methods fail the test on error; they
// are safe for concurrent use.
type Broker struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	control string // base URL of the control API
	proxy   *tcpproxy.Proxy
	stderr  *testutil.Buffer
}

// QueueOptions configures a queue of the stand-in.
type QueueOptions struct {
	// MaxMessageSize is the largest transfer (a message or a batch) the
	// queue accepts and advertises on attach, in bytes (default 256 KiB,
	// Service Bus Standard's limit).
	MaxMessageSize int `json:"maxMessageSize,omitempty"`
	// DuplicateDetection, when positive, drops a message whose MessageID
	// was stored within that window (it is still acknowledged).
	DuplicateDetection time.Duration `json:"-"`
	// LockDuration is how long a peek-lock lasts (default 60s).
	LockDuration time.Duration `json:"-"`
	// Unauthorized makes put-token for the queue answer 401.
	Unauthorized bool `json:"unauthorized,omitempty"`
	// Discard acknowledges and counts messages without keeping them (for
	// benchmarks).
	Discard bool `json:"discard,omitempty"`
}

// Stats are a queue's counters.
type Stats struct {
	Active       int `json:"active"`       // stored, not locked
	Locked       int `json:"locked"`       // stored, locked by a receiver
	Stored       int `json:"stored"`       // messages stored since creation
	Transfers    int `json:"transfers"`    // transfers received (a batch is one)
	Batches      int `json:"batches"`      // transfers in the batch format
	Duplicates   int `json:"duplicates"`   // dropped by duplicate detection
	Rejected     int `json:"rejected"`     // transfers rejected (faults, too large)
	Completed    int `json:"completed"`    // settled as accepted
	Abandoned    int `json:"abandoned"`    // settled as modified (the SDK's abandon)
	Released     int `json:"released"`     // settled as released: not counted as a delivery
	DeadLettered int `json:"deadLettered"` // settled as rejected
	LockExpired  int `json:"lockExpired"`  // locks that expired
	LockLost     int `json:"lockLost"`     // settlements refused: lock expired
	Scheduled    int `json:"scheduled"`    // stored with a scheduled enqueue time
	Waiting      int `json:"waiting"`      // stored, scheduled for later: not yet enqueued
	Expired      int `json:"expired"`      // removed: their time to live ran out
}

var (
	installOnce sync.Once
	installErr  error
)

// dir returns the directory of server.js.
func dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "testdata")
}

// Start starts a stand-in for the test and stops it when the test ends. It
// skips the test when node or npm is not installed, and fails it when the
// stand-in cannot be installed or started.
func Start(tb testing.TB) *Broker {
	tb.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		tb.Skip("sbfake: node is not on PATH; the Service Bus stand-in needs Node.js (and npm) to run")
	}
	if _, err := exec.LookPath("npm"); err != nil {
		tb.Skip("sbfake: npm is not on PATH; the Service Bus stand-in needs it to install rhea")
	}
	installOnce.Do(func() { installErr = install() })
	if installErr != nil {
		tb.Fatalf("sbfake: %v", installErr)
	}

	b := &Broker{stderr: &testutil.Buffer{Max: 1 << 20}} // enough to diagnose
	b.cmd = exec.Command(node, filepath.Join(dir(), "server.js"))
	b.cmd.Dir = dir()
	b.cmd.Stderr = b.stderr
	b.stdin, err = b.cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := b.cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := b.cmd.Start(); err != nil {
		tb.Fatalf("sbfake: starting node: %v", err)
	}
	tb.Cleanup(b.stop)
	tb.Cleanup(func() {
		if tb.Failed() && b.stderr.Len() > 0 {
			tb.Logf("sbfake stderr:\n%s", b.stderr.String())
		}
	})

	type ports struct{ AMQP, Control int }
	got := make(chan ports, 1)
	go func() {
		line, err := bufio.NewReader(stdout).ReadString('\n')
		var p ports
		if err == nil && json.Unmarshal([]byte(line), &p) == nil {
			got <- p
		}
		close(got)
		io.Copy(io.Discard, stdout)
	}()
	select {
	case p, ok := <-got:
		if !ok {
			b.stop()
			tb.Fatalf("sbfake: node exited before announcing its ports; stderr:\n%s", b.stderr.String())
		}
		b.control = fmt.Sprintf("http://127.0.0.1:%d", p.Control)
		b.proxy, err = tcpproxy.New(fmt.Sprintf("127.0.0.1:%d", p.AMQP))
		if err != nil {
			tb.Fatalf("sbfake: %v", err)
		}
		tb.Cleanup(b.proxy.Close)
	case <-time.After(30 * time.Second):
		tb.Fatalf("sbfake: node did not announce its ports within 30s; stderr:\n%s", b.stderr.String())
	}
	return b
}

func (b *Broker) stop() {
	if b.cmd.Process == nil || b.cmd.ProcessState != nil {
		return
	}
	b.stdin.Close() // the stand-in exits when stdin closes
	done := make(chan struct{})
	go func() { b.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		b.cmd.Process.Kill()
		<-done
	}
}

// install runs npm ci in testdata unless rhea is installed there already,
// under an exclusive file lock so that test binaries of several packages
// running at once do not install over each other.
func install() error {
	d := dir()
	lock, err := os.OpenFile(filepath.Join(d, ".install.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("install lock: %w", err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("install lock: %w", err)
	}
	defer unix.Flock(int(lock.Fd()), unix.LOCK_UN)

	if b, err := os.ReadFile(filepath.Join(d, "node_modules", "rhea", "package.json")); err == nil {
		var pkg struct{ Version string }
		if json.Unmarshal(b, &pkg) == nil && pkg.Version == rheaVersion {
			return nil
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = d
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("npm ci in %s (installs rhea %s for the Service Bus stand-in): %w\n%s", d, rheaVersion, err, out)
	}
	return nil
}

// Addr returns the host:port that clients connect to (the proxy's).
func (b *Broker) Addr() string { return b.proxy.Addr() }

// ConnectionString returns a connection string for the SDK: plain AMQP to
// Addr, as for the Service Bus emulator (UseDevelopmentEmulator=true makes
// the SDK skip TLS and use SASL ANONYMOUS).
func (b *Broker) ConnectionString() string {
	return "Endpoint=sb://" + b.Addr() + ";SharedAccessKeyName=sbfake;SharedAccessKey=c2JmYWtl;UseDevelopmentEmulator=true"
}

// CreateQueue creates (or replaces, empty) the queue name. Service Bus
// entity names are case-insensitive, and so are the stand-in's.
func (b *Broker) CreateQueue(tb testing.TB, name string, opts QueueOptions) {
	tb.Helper()
	body := map[string]any{}
	raw, _ := json.Marshal(opts)
	json.Unmarshal(raw, &body)
	if opts.DuplicateDetection > 0 {
		body["duplicateDetectionMs"] = opts.DuplicateDetection.Milliseconds()
	}
	if opts.LockDuration > 0 {
		body["lockDurationMs"] = opts.LockDuration.Milliseconds()
	}
	b.call(tb, http.MethodPut, "/entities/"+url.PathEscape(name), body, nil)
}

// Fail makes the queue reject its next n transfers with the AMQP error
// condition (e.g. "com.microsoft:server-busy") and description.
func (b *Broker) Fail(tb testing.TB, queue string, n int, condition, description string) {
	tb.Helper()
	b.call(tb, http.MethodPost, "/entities/"+url.PathEscape(queue)+"/faults",
		map[string]any{"count": n, "condition": condition, "description": description}, nil)
}

// Stats returns the queue's counters.
func (b *Broker) Stats(tb testing.TB, queue string) Stats {
	tb.Helper()
	var s Stats
	b.call(tb, http.MethodGet, "/entities/"+url.PathEscape(queue), nil, &s)
	return s
}

// Outage takes the stand-in off the network until restore is called: the
// proxy's listening socket is closed (new connections are refused) and
// every connection through it is cut. The queues keep their messages;
// restore listens on the same address again.
func (b *Broker) Outage(tb testing.TB) (restore func()) {
	tb.Helper()
	b.proxy.Cut()
	var once sync.Once
	return func() {
		once.Do(func() {
			if err := b.proxy.Restore(); err != nil {
				tb.Errorf("sbfake: restoring the proxy on %s: %v", b.proxy.Addr(), err)
			}
		})
	}
}

func (b *Broker) call(tb testing.TB, method, path string, in, out any) {
	tb.Helper()
	var body io.Reader
	if in != nil {
		raw, err := json.Marshal(in)
		if err != nil {
			tb.Fatal(err)
		}
		body = bytes.NewReader(raw)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, b.control+path, body)
	if err != nil {
		tb.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatalf("sbfake: %s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		tb.Fatalf("sbfake: %s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(raw)))
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			tb.Fatalf("sbfake: %s %s: decoding %q: %v", method, path, raw, err)
		}
	}
}
