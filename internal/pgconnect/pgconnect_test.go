package pgconnect

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestConnectTimeoutDefaultsUnlessTheURLSetsOne(t *testing.T) {
	c, err := Config("postgres://u@db.example.com/app")
	if err != nil {
		t.Fatal(err)
	}
	if c.ConnectTimeout != DefaultConnectTimeout {
		t.Errorf("no connect_timeout: %v, want %v", c.ConnectTimeout, DefaultConnectTimeout)
	}
	c, err = Config("postgres://u@db.example.com/app?connect_timeout=3")
	if err != nil {
		t.Fatal(err)
	}
	if c.ConnectTimeout != 3*time.Second {
		t.Errorf("connect_timeout=3: %v", c.ConnectTimeout)
	}
	rc, err := ReplicationConfig("host=db.example.com user=u dbname=app")
	if err != nil {
		t.Fatal(err)
	}
	if rc.ConnectTimeout != DefaultConnectTimeout || rc.RuntimeParams["replication"] != "database" {
		t.Errorf("replication config: timeout %v, params %v", rc.ConnectTimeout, rc.RuntimeParams)
	}
	if got := Describe(rc); got != "host=db.example.com port=5432 database=app user=u" {
		t.Errorf("Describe = %q", got)
	}
}

func TestParseErrorsNeverRepeatTheURL(t *testing.T) {
	const secret = "Sup3r$ecret"
	for _, url := range []string{
		"postgres://u:" + secret + "@h/db%zz",
		"postgres://u:" + secret + "@h:notaport/db",
		"postgres://u:" + secret + "@h/db?sslmode=bogus",
		"host=h password=" + secret + " sslmode=bogus",
		"host=h password='" + secret,
		"postgres://u:" + secret + "@[::1/db",
	} {
		_, err := Config(url)
		if err == nil {
			t.Errorf("%q: no error", url)
			continue
		}
		if !errors.Is(err, ErrURL) || strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "h/db") {
			t.Errorf("%q: %v", url, err)
		}
	}
}

func TestUnverifiedFlagsRemoteServersWithoutVerifyFull(t *testing.T) {
	for url, flagged := range map[string]bool{
		"postgres://u@db.example.com/app":                                        true,
		"postgres://u@db.example.com/app?sslmode=require":                        true,
		"postgres://u@db.example.com/app?sslmode=disable":                        true,
		"postgres://u@127.0.0.1/app?sslmode=disable":                             false,
		"postgres://u@localhost/app":                                             false,
		"host=/var/run/postgresql user=u":                                        false,
		"postgres://u@[::1]/app?sslmode=disable":                                 false,
		"postgres://u@db.example.com/app?sslmode=verify-full&sslrootcert=system": false,
	} {
		c, err := ReplicationConfig(url)
		if err != nil {
			t.Fatalf("%s: %v", url, err)
		}
		if got := Unverified(c) != ""; got != flagged {
			t.Errorf("%s: flagged %v (%q), want %v", url, got, Unverified(c), flagged)
		}
	}
}

func TestRefusedDecidesByTheSQLSTATE(t *testing.T) {
	for code, want := range map[string]bool{
		"28P01": true, "28000": true, "3D000": true, // password, authorization, database
		"57P03": false, "53300": false, "57P01": false, // starting up, too many connections, terminated
	} {
		err := fmt.Errorf("connecting to x: %w", &pgconn.ConnectError{Config: &pgconn.Config{}})
		if Refused(err) {
			t.Errorf("a ConnectError without a server error is refused")
		}
		err = fmt.Errorf("connecting to x: %w", &pgconn.PgError{Code: code, Message: "password authentication failed"})
		if got := Refused(err); got != want {
			t.Errorf("SQLSTATE %s: Refused = %v, want %v", code, got, want)
		}
	}
	if Refused(errors.New("password authentication failed (SQLSTATE 28P01)")) {
		t.Error("Refused read the error's text")
	}
}

// TestConnLostAndShuttingDownDecideByKind: a server going away (SQLSTATE
// class 57, the connection closed, a network error) is a connection
// lost; a server that answered otherwise (a refused role, a missing
// table) is not. ShuttingDown takes only what a stopping or starting
// server says, and a connection closed under it.
func TestConnLostAndShuttingDownDecideByKind(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("dead-letter: holding message 0/1: %w", err) }
	for _, c := range []struct {
		name           string
		err            error
		lost, stopping bool
	}{
		{"admin shutdown", wrap(&pgconn.PgError{Code: "57P01"}), true, true},
		{"crash shutdown", wrap(&pgconn.PgError{Code: "57P02"}), true, true},
		{"cannot connect now", wrap(&pgconn.PgError{Code: "57P03"}), true, true},
		{"query canceled", wrap(&pgconn.PgError{Code: "57014"}), true, false},
		{"conn closed", wrap(pgconn.ErrConnClosed), true, true},
		{"eof", wrap(io.EOF), true, true},
		{"unexpected eof", wrap(io.ErrUnexpectedEOF), true, true},
		{"connection refused", wrap(&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}), true, false},
		{"password refused", wrap(&pgconn.PgError{Code: "28P01"}), false, false},
		{"column missing", wrap(&pgconn.PgError{Code: "42703"}), false, false},
		{"other", errors.New("conn closed"), false, false}, // by kind, never by text
		{"nil", nil, false, false},
	} {
		if got := ConnLost(c.err); got != c.lost {
			t.Errorf("%s: ConnLost %v, want %v", c.name, got, c.lost)
		}
		if got := ShuttingDown(c.err); got != c.stopping {
			t.Errorf("%s: ShuttingDown %v, want %v", c.name, got, c.stopping)
		}
	}
}
