// Package pgtest starts throwaway PostgreSQL clusters with wal_level=logical
// for tests, benchmarks and the demo.
//
// A cluster lives in a temporary directory, listens on 127.0.0.1 on a free
// port, and is made with the initdb and pg_ctl of the newest PostgreSQL found
// under /usr/lib/postgresql (Debian's layout) or on PATH. When the process
// runs as root, the server runs as the "postgres" OS user, because PostgreSQL
// refuses to run as root.
//
// Tests call URL(t), which returns WALPOST_TEST_DATABASE_URL when set and
// otherwise starts one cluster per test binary on first use; the test binary's
// TestMain calls Main so that the cluster is stopped when the tests end.
// Where no PostgreSQL server is installed, a test that needs one fails
// saying what to install, or is skipped under go test -short.
//
// Cluster is safe for concurrent use.
package pgtest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Options configures a throwaway cluster. The zero value is usable.
type Options struct {
	// Fsync keeps fsync on. Off by default: the clusters are throwaway, and
	// fsync=off keeps the disk's flush latency out of measurements.
	Fsync bool
	// Settings are extra postgresql.conf lines, e.g. "wal_sender_timeout = 5s".
	Settings []string
	// Log receives progress lines (may be nil).
	Log func(format string, args ...any)
	// Version is the PostgreSQL major version to run (BinFor); 0 for the
	// machine's own (FindBin).
	Version int
}

// Cluster is a running throwaway PostgreSQL server.
type Cluster struct {
	Dir   string // root of the temporary directory (data, socket, log)
	Port  int
	Major int // the server's major version
	// PrimarySlot is the physical slot on its primary a replica streams
	// through ("" for a primary, or a replica without one: StartReplica
	// with pg_basebackup).
	PrimarySlot string
	bin         string
	cred        *syscall.Credential
	mu          sync.Mutex
}

// ErrNoServer is wrapped by FindBin's error, and so by Start's, when no
// PostgreSQL server binaries are found: tests skip under -short then
// (SharedCluster, StartCluster) and fail otherwise.
var ErrNoServer = errors.New("pgtest: no PostgreSQL server binaries found")

// debianBins is where Debian's packages install each major version's
// server programs.
var debianBins = "/usr/lib/postgresql/*/bin"

// FindBin returns the directory holding initdb, pg_ctl and pg_recvlogical:
// $WALPOST_PG_BIN when set, else the newest under /usr/lib/postgresql,
// else the directory of initdb on PATH.
func FindBin() (string, error) {
	if d := os.Getenv("WALPOST_PG_BIN"); d != "" {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err != nil {
			return "", fmt.Errorf("%w: WALPOST_PG_BIN is %s, which has no initdb; point it to the bin directory of a PostgreSQL server installation", ErrNoServer, d)
		}
		return d, nil
	}
	dirs, _ := filepath.Glob(debianBins)
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", fmt.Errorf("%w (looked in /usr/lib/postgresql/*/bin and PATH); "+
		"install them with 'apt-get install postgresql', or set WALPOST_TEST_DATABASE_URL to a server with wal_level=logical", ErrNoServer)
}

func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// Start creates and starts a new cluster.
func Start(opts Options) (*Cluster, error) {
	var bin string
	var err error
	if opts.Version != 0 {
		bin, err = BinFor(opts.Version)
	} else {
		bin, err = FindBin()
	}
	if err != nil {
		return nil, err
	}
	major, err := ServerVersion(bin)
	if err != nil {
		return nil, err
	}
	logf := opts.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	dir, err := os.MkdirTemp("", "walpost-pg-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{Dir: dir, bin: bin, Major: major}
	fail := func(err error) (*Cluster, error) {
		os.RemoveAll(dir)
		return nil, err
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return fail(fmt.Errorf("pgtest: running as root needs the 'postgres' OS user to run the server: %w", err))
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			return fail(err)
		}
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fail(err)
	}
	port, err := FreePort()
	if err != nil {
		return fail(err)
	}
	c.Port = port
	logf("pgtest: initdb in %s (%s)", dir, bin)
	if out, err := c.run("initdb", "-D", c.dataDir(), "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C"); err != nil {
		return fail(fmt.Errorf("pgtest: initdb: %v\n%s", err, out))
	}
	fsync := "off"
	if opts.Fsync {
		fsync = "on"
	}
	conf := []string{
		"listen_addresses = '127.0.0.1'",
		fmt.Sprintf("port = %d", port),
		fmt.Sprintf("unix_socket_directories = '%s'", dir),
		"wal_level = logical",
		"max_wal_senders = 40",
		"max_replication_slots = 40",
		"max_connections = 200",
		"shared_buffers = 128MB",
		"fsync = " + fsync,
		"full_page_writes = off",
		"synchronous_commit = on",
		"logging_collector = off",
		"log_min_messages = warning",
	}
	conf = append(conf, opts.Settings...)
	f, err := os.OpenFile(filepath.Join(c.dataDir(), "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fail(err)
	}
	_, err = f.WriteString("\n# pgtest\n" + strings.Join(conf, "\n") + "\n")
	f.Close()
	if err != nil {
		return fail(err)
	}
	if err := c.Start(); err != nil {
		return fail(err)
	}
	logf("pgtest: postgres listening on 127.0.0.1:%d", port)
	return c, nil
}

func (c *Cluster) dataDir() string { return filepath.Join(c.Dir, "data") }

// LogFile is the server's log.
func (c *Cluster) LogFile() string { return filepath.Join(c.Dir, "server.log") }

// Bin returns the path of a PostgreSQL program of the cluster's version.
func (c *Cluster) Bin(name string) string { return filepath.Join(c.bin, name) }

func (c *Cluster) run(name string, args ...string) ([]byte, error) {
	cmd := exec.Command(filepath.Join(c.bin, name), args...)
	cmd.Dir = c.Dir
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	}
	return cmd.CombinedOutput()
}

// Start starts a stopped cluster and waits until it accepts connections.
func (c *Cluster) Start() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if out, err := c.run("pg_ctl", "start", "-w", "-t", "60", "-D", c.dataDir(), "-l", c.LogFile()); err != nil {
		logTail, _ := os.ReadFile(c.LogFile())
		return fmt.Errorf("pgtest: pg_ctl start: %v\n%s\n%s", err, out, tail(logTail, 2000))
	}
	return nil
}

// Stop stops the server: mode "fast" (clean) or "immediate" (like a crash).
func (c *Cluster) Stop(mode string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if out, err := c.run("pg_ctl", "stop", "-w", "-t", "60", "-m", mode, "-D", c.dataDir()); err != nil {
		return fmt.Errorf("pgtest: pg_ctl stop: %v\n%s", err, out)
	}
	return nil
}

// Restart stops the server with the given mode and starts it again.
func (c *Cluster) Restart(mode string) error {
	if err := c.Stop(mode); err != nil {
		return err
	}
	return c.Start()
}

// Close stops the server and removes its directory.
func (c *Cluster) Close() error {
	err := c.Stop("immediate")
	if rmErr := os.RemoveAll(c.Dir); err == nil {
		err = rmErr
	}
	return err
}

// URL returns a connection URL for database db as the superuser postgres.
func (c *Cluster) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.Port, db)
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// WaitFor polls cond every 20 ms until it returns true or timeout passes.
func WaitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}
