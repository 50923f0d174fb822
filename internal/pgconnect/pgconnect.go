// Package pgconnect makes walpost's PostgreSQL connections: every
// connection, ordinary or replication, is parsed from postgres.url here, so
// that all of them share the same connect timeout, the same way of naming
// the server in logs, and the same rule that the URL (which may hold a
// password) is never repeated in an error.
//
// A server that accepts TCP but never answers would otherwise hang a
// connection attempt forever: unless the URL sets connect_timeout (or the
// environment PGCONNECT_TIMEOUT), every attempt gives up after
// DefaultConnectTimeout, covering TCP, TLS and authentication.
package pgconnect

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DefaultConnectTimeout bounds a connection attempt when the URL sets no
// connect_timeout.
const DefaultConnectTimeout = 10 * time.Second

// ErrURL is wrapped by errors about postgres.url itself.
var ErrURL = errors.New("pgconnect: postgres.url is not valid")

// Config parses url for an ordinary connection, after Normalize (an
// ADO.NET connection string is converted, never sent as it is).
func Config(url string) (*pgx.ConnConfig, error) {
	url, err := Normalize(url)
	if err != nil {
		return nil, err
	}
	c, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, parseError(err)
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if err := applyKeepAlive(&c.Config); err != nil {
		return nil, err
	}
	return c, nil
}

// ReplicationConfig parses url for a logical replication connection
// (replication=database, application_name=walpost; DateStyle ISO and
// TimeZone UTC, so that pgoutput writes timestamps in the one form the
// decoder reads; bytea_output hex, whatever the database's default).
func ReplicationConfig(url string) (*pgconn.Config, error) {
	c, err := Config(url)
	if err != nil {
		return nil, err
	}
	rc := &c.Config
	rc.RuntimeParams["replication"] = "database"
	rc.RuntimeParams["application_name"] = "walpost"
	rc.RuntimeParams["datestyle"] = "ISO, MDY"
	rc.RuntimeParams["timezone"] = "UTC"
	rc.RuntimeParams["bytea_output"] = "hex"
	return rc, nil
}

// parseError keeps what went wrong but never the connection string: pgx's
// parse errors quote it (redacting only what they recognise as a password).
func parseError(err error) error {
	var pe *pgconn.ParseConfigError
	if !errors.As(err, &pe) {
		return fmt.Errorf("%w (the URL is not repeated: it may hold a password)", ErrURL)
	}
	// Error() is "cannot parse `<string>`: <msg>" plus " (<inner>)"; msg is
	// one of pgconn's fixed texts ("invalid sslmode", "failed to parse as
	// URL").
	text := pe.Error()
	if inner := pe.Unwrap(); inner != nil {
		text = strings.TrimSuffix(text, " ("+inner.Error()+")")
	}
	what := "malformed"
	if i := strings.LastIndex(text, "`: "); i >= 0 {
		what = text[i+3:]
	}
	return fmt.Errorf("%w: %s (the URL is not repeated: it may hold a password)", ErrURL, what)
}

// Refused reports whether err, from connecting, is the server refusing
// the connection for good: the password or the role's authorization
// (SQLSTATE 28P01 invalid_password, 28000
// invalid_authorization_specification: no pg_hba.conf entry, no such
// role) or the database (3D000 invalid_catalog_name). Trying again
// cannot help until postgres.url or the server's configuration changes;
// any other failure (a server not reachable, starting up, or out of
// connection slots) may pass. It decides by the error's kind, never its
// text.
func Refused(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "28P01", "28000", "3D000":
		return true
	}
	return false
}

// ConnLost reports whether err is a connection to PostgreSQL lost or not
// made for a reason that passes: the server shutting down, restarting or
// starting (SQLSTATE class 57: admin_shutdown, crash_shutdown,
// cannot_connect_now...), the connection closed (io.EOF, conn closed),
// a network error, or anything pgconn says is safe to retry. An error
// the server answered otherwise (any other SQLSTATE) is not. It decides
// by the error's kind, never its text (docs/design.md, "Error policy").
func ConnLost(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return strings.HasPrefix(pgErr.Code, "57")
	}
	var netErr net.Error
	return errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		pgconn.SafeToRetry(err) || pgconn.Timeout(err) || errors.As(err, &netErr)
}

// ShuttingDown reports whether err is the server going away under a
// connection: terminated by a shutdown (SQLSTATE 57P01 admin_shutdown,
// 57P02 crash_shutdown), refusing new ones while it stops or starts
// (57P03 cannot_connect_now), or the connection closed. A writer beside
// the replication connection that gets it ends the cycle: a WAL sender
// in shutdown waits for the client to confirm all it sent, which the
// relay cannot while its writes fail (docs/design.md, "Error policy").
func ShuttingDown(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "57P01", "57P02", "57P03":
			return true
		}
		return false
	}
	return errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// RefusedHint is what an error for which Refused holds adds: what to do.
const RefusedHint = "the server refused the connection (not a network fault, so it is not retried): fix the user, password or database of postgres.url (PGPASSWORD, PGPASSFILE), or the role or pg_hba.conf on the server"

// ExplainRefused returns err, when Refused holds for it, with the
// server's refusal first (pgx lists every attempt, and with sslmode=prefer
// the first is "tls error: server refused TLS connection", which is not
// the problem) and RefusedHint; any other error as it is. Every command
// that connects reports a refusal so (cdc run, init, status, …).
func ExplainRefused(err error) error {
	var pgErr *pgconn.PgError
	if !Refused(err) || !errors.As(err, &pgErr) || strings.Contains(err.Error(), RefusedHint) {
		return err
	}
	return &refusedError{err: err, text: fmt.Sprintf("%s (SQLSTATE %s); %s; in full: %s", pgErr.Message, pgErr.Code, RefusedHint, err)}
}

// refusedError is ExplainRefused's error: its own text, unwrapping to
// the original.
type refusedError struct {
	err  error
	text string
}

func (e *refusedError) Error() string { return e.text }
func (e *refusedError) Unwrap() error { return e.err }

// Connect opens an ordinary connection.
func Connect(ctx context.Context, url string) (*pgx.Conn, error) {
	c, err := Config(url)
	if err != nil {
		return nil, err
	}
	conn, err := pgx.ConnectConfig(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", Describe(&c.Config), err)
	}
	return conn, nil
}

// Describe names the server and role of c for logs and errors: host, port,
// database and user, never the password.
func Describe(c *pgconn.Config) string {
	return fmt.Sprintf("host=%s port=%d database=%s user=%s", c.Host, c.Port, c.Database, c.User)
}

// DescribeURL is Describe of url parsed, or a note that it does not parse.
func DescribeURL(url string) string {
	url, err := Normalize(url)
	if err != nil {
		return "(postgres.url does not parse)"
	}
	c, err := pgconn.ParseConfig(url)
	if err != nil {
		return "(postgres.url does not parse)"
	}
	return Describe(c)
}

// Unverified reports why a connection to c could be read or altered by a
// machine in the middle, or "" when it cannot: TLS that does not verify
// the server's certificate and name (any sslmode but verify-full), to a
// host that is not the local machine.
func Unverified(c *pgconn.Config) string {
	if IsLocal(c.Host) {
		return ""
	}
	switch {
	case c.TLSConfig == nil:
		return "TLS is off (sslmode=disable or allow)"
	case c.TLSConfig.InsecureSkipVerify || len(c.Fallbacks) > 0 && c.Fallbacks[len(c.Fallbacks)-1].TLSConfig == nil:
		return "the server's certificate is not verified (sslmode=prefer, require or verify-ca)"
	}
	return verifiesName(c.TLSConfig)
}

func verifiesName(t *tls.Config) string {
	if t.ServerName == "" {
		return "the server's name is not checked against its certificate"
	}
	return ""
}

// IsLocal reports whether host is this machine: a Unix socket directory or
// a loopback name or address.
func IsLocal(host string) bool {
	if strings.HasPrefix(host, "/") || host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
