// Package azurite runs Azurite, Microsoft's Azure Storage emulator (the
// npm package azurite), for tests of the claim check: its blob service on
// a free port of 127.0.0.1, with a workspace in the test's temporary
// directory, behind a tcpproxy.Proxy that a test can cut or freeze to
// simulate a store that is down or hangs.
//
// Start installs the pinned version into /var/tmp/walpost-azurite with
// npm (once per machine, under a file lock; about 20 s) and skips the
// test when node or npm is not on PATH.
package azurite

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"golang.org/x/sys/unix"

	"github.com/walpost/walpost/internal/tcpproxy"
	"github.com/walpost/walpost/internal/testutil"
)

// Version is the azurite version installed.
const Version = "3.37.0"

// Dir is where Start installs azurite.
const Dir = "/var/tmp/walpost-azurite"

// The emulator's well-known development account.
const (
	Account = "devstoreaccount1"
	Key     = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

// Server is a running Azurite blob service. Its methods fail the test on
// error; they are safe for concurrent use.
type Server struct {
	// Proxy forwards to the emulator; ConnectionString points at it.
	Proxy  *tcpproxy.Proxy
	direct string // host:port of the emulator itself
	cmd    *exec.Cmd
	stderr *testutil.Buffer
}

var (
	installOnce sync.Once
	installErr  error
)

// Start starts Azurite's blob service for the test and stops it when the
// test ends.
func Start(tb testing.TB) *Server {
	tb.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		tb.Skip("azurite: node is not on PATH; the Azure Storage emulator needs Node.js (and npm to install it)")
	}
	if _, err := exec.LookPath("npm"); err != nil {
		tb.Skip("azurite: npm is not on PATH; it installs the Azure Storage emulator (npm package azurite)")
	}
	installOnce.Do(func() { installErr = install() })
	if installErr != nil {
		tb.Fatalf("azurite: %v", installErr)
	}
	main := filepath.Join(Dir, "node_modules", "azurite", "dist", "src", "blob", "main.js")
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			tb.Fatal(err)
		}
		s := &Server{direct: fmt.Sprintf("127.0.0.1:%d", port), stderr: &testutil.Buffer{Max: 1 << 20}}
		s.cmd = exec.Command(node, main, "--blobHost", "127.0.0.1", "--blobPort", fmt.Sprint(port),
			"--location", tb.TempDir(), "--skipApiVersionCheck", "--loose", "--silent", "--disableTelemetry")
		s.cmd.Stdout = s.stderr
		s.cmd.Stderr = s.stderr
		if err := s.cmd.Start(); err != nil {
			tb.Fatalf("azurite: starting node: %v", err)
		}
		exited := make(chan struct{})
		go func() { s.cmd.Wait(); close(exited) }()
		stop := func() {
			s.cmd.Process.Kill()
			<-exited
		}
		if waitListening(s.direct, exited, 30*time.Second) {
			tb.Cleanup(stop)
			if s.Proxy, err = tcpproxy.New(s.direct); err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(s.Proxy.Close)
			return s
		}
		stop()
		if attempt == 3 {
			tb.Fatalf("azurite: the blob service did not listen on %s; output:\n%s", s.direct, s.stderr.String())
		}
	}
}

// ConnectionString returns the connection string of the development
// account through the proxy.
func (s *Server) ConnectionString() string {
	return fmt.Sprintf("DefaultEndpointsProtocol=http;AccountName=%s;AccountKey=%s;BlobEndpoint=http://%s/%s;", Account, Key, s.Proxy.Addr(), Account)
}

// DirectConnectionString is ConnectionString around the proxy: for the
// test's own checks while the proxy is cut or frozen.
func (s *Server) DirectConnectionString() string {
	return fmt.Sprintf("DefaultEndpointsProtocol=http;AccountName=%s;AccountKey=%s;BlobEndpoint=http://%s/%s;", Account, Key, s.direct, Account)
}

// Client returns a client of the emulator through the proxy, as the
// relay and receivers see it.
func (s *Server) Client(tb testing.TB) *azblob.Client {
	tb.Helper()
	return s.client(tb, s.ConnectionString())
}

// DirectClient returns a client of the emulator that bypasses the proxy.
func (s *Server) DirectClient(tb testing.TB) *azblob.Client {
	tb.Helper()
	return s.client(tb, s.DirectConnectionString())
}

func (s *Server) client(tb testing.TB, cs string) *azblob.Client {
	tb.Helper()
	c, err := azblob.NewClientFromConnectionString(cs, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// CreateContainer creates a container.
func (s *Server) CreateContainer(tb testing.TB, name string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.DirectClient(tb).CreateContainer(ctx, name, nil); err != nil {
		tb.Fatalf("azurite: creating container %s: %v", name, err)
	}
}

// Blobs lists the names of a container's blobs, in order.
func (s *Server) Blobs(tb testing.TB, container string) []string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var names []string
	pager := s.DirectClient(tb).NewListBlobsFlatPager(container, nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			tb.Fatalf("azurite: listing %s: %v", container, err)
		}
		for _, b := range page.Segment.BlobItems {
			names = append(names, *b.Name)
		}
	}
	return names
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// waitListening polls addr until it accepts a connection, the process
// exits, or timeout passes.
func waitListening(addr string, exited <-chan struct{}, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return false
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// install runs npm install of azurite@Version into Dir unless it is
// there, under an exclusive file lock so that test binaries running at
// once do not install over each other.
func install() error {
	if err := os.MkdirAll(Dir, 0o755); err != nil {
		return err
	}
	lock, err := os.OpenFile(filepath.Join(Dir, ".install.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("install lock: %w", err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("install lock: %w", err)
	}
	defer unix.Flock(int(lock.Fd()), unix.LOCK_UN)
	pkg, err := os.ReadFile(filepath.Join(Dir, "node_modules", "azurite", "package.json"))
	if err == nil && strings.Contains(string(pkg), `"version": "`+Version+`"`) {
		return nil
	}
	cmd := exec.Command("npm", "install", "--no-audit", "--no-fund", "--prefix", Dir, "azurite@"+Version)
	cmd.Env = append(os.Environ(), "npm_config_update_notifier=false", "npm_config_fetch_retries=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("npm install azurite@%s into %s: %v\n%s", Version, Dir, err, out)
	}
	return nil
}
