package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

func TestIntegrationClusterHasLogicalWAL(t *testing.T) {
	conn := Connect(t, URL(t))
	var level string
	if err := conn.QueryRow(context.Background(), "SHOW wal_level").Scan(&level); err != nil {
		t.Fatal(err)
	}
	if level != "logical" {
		t.Fatalf("wal_level = %q, want logical", level)
	}
}

// childEnv, when set, makes TestNeedsServer ask for a server: "shared"
// through URL, "own" through StartCluster, "named" through NamedCluster. Only
// TestWithoutPostgreSQLShortSkipsAndOtherwiseFails sets it.
const childEnv = "WALPOST_PGTEST_CHILD"

func TestNeedsServer(t *testing.T) {
	switch os.Getenv(childEnv) {
	case "shared":
		URL(t)
	case "own":
		StartCluster(t, Options{})
	case "named":
		NamedCluster(t, "child", Options{})
	default:
		t.Skip("run by TestWithoutPostgreSQLShortSkipsAndOtherwiseFails")
	}
	t.Log("got a server")
}

// TestWithoutPostgreSQLShortSkipsAndOtherwiseFails: on a machine without
// PostgreSQL's server binaries (here: WALPOST_PG_BIN naming an empty
// directory), a test that needs a server is skipped under -short, saying
// why, and fails without it, saying what to install; through the shared
// cluster and a cluster of its own alike.
func TestWithoutPostgreSQLShortSkipsAndOtherwiseFails(t *testing.T) {
	if _, err := FindBin(); err != nil && !errors.Is(err, ErrNoServer) {
		t.Fatalf("FindBin: %v does not wrap ErrNoServer", err)
	}
	empty := t.TempDir()
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "WALPOST_TEST_DATABASE_URL=") && !strings.HasPrefix(kv, "WALPOST_PG_BIN=") {
			env = append(env, kv)
		}
	}
	for _, how := range []string{"shared", "own", "named"} {
		for _, short := range []bool{true, false} {
			args := []string{"-test.run=^TestNeedsServer$", "-test.v", "-test.count=1"}
			if short {
				args = append(args, "-test.short")
			}
			cmd := exec.Command(os.Args[0], args...)
			cmd.Env = append(slices.Clip(env), "WALPOST_PG_BIN="+empty, childEnv+"="+how)
			out, err := cmd.CombinedOutput()
			code := cmd.ProcessState.ExitCode()
			if err != nil && code <= 0 {
				t.Fatal(err)
			}
			s := string(out)
			switch {
			case strings.Contains(s, "got a server"):
				t.Fatalf("%s, short %v: got a server from an empty WALPOST_PG_BIN:\n%s", how, short, s)
			case short && (code != 0 || !strings.Contains(s, "--- SKIP: TestNeedsServer") || !strings.Contains(s, "skipped under -short: this test needs PostgreSQL")):
				t.Errorf("%s, under -short: exit %d, want 0 and a skip saying why:\n%s", how, code, s)
			case !short && (code != 1 || !strings.Contains(s, "--- FAIL: TestNeedsServer") || !strings.Contains(s, "WALPOST_PG_BIN is "+empty+", which has no initdb")):
				t.Errorf("%s, without -short: exit %d, want 1 and a failure saying what is missing:\n%s", how, code, s)
			}
		}
	}
	// Where nothing is configured and nothing found, the message says
	// what to install.
	t.Setenv("WALPOST_PG_BIN", "")
	t.Setenv("PATH", empty)
	defer func(d string) { debianBins = d }(debianBins)
	debianBins = empty + "/*/bin"
	if d, err := FindBin(); !errors.Is(err, ErrNoServer) || !strings.Contains(err.Error(), "apt-get install postgresql") {
		t.Errorf("FindBin with nothing installed: %q, %v; want ErrNoServer saying what to install", d, err)
	}
}

// TestIntegrationNamedClusterIsSharedAndHasItsSettings: every call with a
// name gets the one cluster started with the first call's settings, apart
// from the shared one.
func TestIntegrationNamedClusterIsSharedAndHasItsSettings(t *testing.T) {
	a := NamedCluster(t, "keep-1mb", Options{Settings: []string{"max_slot_wal_keep_size = 1MB"}})
	if b := NamedCluster(t, "keep-1mb", Options{}); b != a {
		t.Fatalf("a second call started another cluster (ports %d, %d)", a.Port, b.Port)
	}
	if shared := SharedCluster(t); shared != nil && shared.Port == a.Port {
		t.Fatal("the named cluster is the shared one")
	}
	var v string
	if err := Connect(t, a.URL("postgres")).QueryRow(context.Background(), "SHOW max_slot_wal_keep_size").Scan(&v); err != nil || v != "1MB" {
		t.Fatalf("max_slot_wal_keep_size = %q, %v; want 1MB", v, err)
	}
}

// TestIntegrationEveryVersionStarts: a cluster of each supported major
// version starts with wal_level=logical and is that version; a version
// that cannot be had here (no npm, no registry) is skipped, saying so.
// On the newest, a replica made without pg_basebackup (the npm packages
// have none), with ReplicaOptions, follows its primary through its slot.
func TestIntegrationEveryVersionStarts(t *testing.T) {
	for _, v := range Versions {
		t.Run(fmt.Sprint(v), func(t *testing.T) {
			t.Parallel()
			c := VersionCluster(t, v, Options{})
			if c.Major != v {
				t.Fatalf("cluster of version %d reports major %d", v, c.Major)
			}
			conn := Connect(t, c.URL("postgres"))
			var num int
			var level string
			if err := conn.QueryRow(context.Background(), "SELECT current_setting('server_version_num')::int, current_setting('wal_level')").Scan(&num, &level); err != nil {
				t.Fatal(err)
			}
			if num/10000 != v || level != "logical" {
				t.Fatalf("server_version_num %d, wal_level %s; want %d and logical", num, level, v)
			}
			if v != Versions[len(Versions)-1] {
				return
			}
			r, err := c.StartReplicaWith(ReplicaOptions{Slot: true, DBName: "postgres", Settings: []string{"hot_standby_feedback = on"}})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			var conninfo, feedback string
			if err := Connect(t, r.URL("postgres")).QueryRow(context.Background(), "SELECT current_setting('primary_conninfo'), current_setting('hot_standby_feedback')").Scan(&conninfo, &feedback); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(conninfo, "dbname=postgres") || feedback != "on" {
				t.Fatalf("the replica's primary_conninfo %q, hot_standby_feedback %s; want a dbname and on", conninfo, feedback)
			}
			if !WaitFor(30*time.Second, func() bool {
				var active bool
				return conn.QueryRow(context.Background(), "SELECT active FROM pg_replication_slots WHERE slot_name = $1", r.PrimarySlot).Scan(&active) == nil && active
			}) {
				t.Fatalf("the replica does not stream through its slot %q on the primary", r.PrimarySlot)
			}
			Exec(t, c.URL("postgres"), "CREATE TABLE replicated (n int)", "INSERT INTO replicated VALUES (42)")
			rc := Connect(t, r.URL("postgres"))
			if !WaitFor(30*time.Second, func() bool {
				var n int
				return rc.QueryRow(context.Background(), "SELECT n FROM replicated").Scan(&n) == nil && n == 42
			}) {
				t.Fatal("the replica did not receive the row")
			}
		})
	}
}
