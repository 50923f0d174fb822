package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walpost/walpost/internal/layout"
	"github.com/walpost/walpost/internal/pgconnect"
	"github.com/walpost/walpost/internal/redact"
	"github.com/walpost/walpost/internal/sqlident"
)

// slotRE is PostgreSQL's rule for replication slot names.
var slotRE = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// Validate checks every setting and returns the first error, an *Error
// naming the setting. The order is fixed: the settings in the order the
// file's sections are documented (postgres, columns, relay, sinks, http,
// log, tracing), each section's in the order of its struct's fields, then the
// checks across settings (two columns of one name, two sinks of one name).
// It checks postgres.url with pgconn.ParseConfig, which reads the files the
// URL names (sslrootcert, sslcert, sslkey, a service file) and PG*
// environment variables, as connecting will.
func (c *Config) Validate() error {
	return joinErrors(c.validate(nil))
}

// validate runs every section's check and returns the errors, the first
// of each section, leaving out those about a field at or below one of
// bad (a setting that did not decode: its zero value would be blamed
// again).
func (c *Config) validate(bad []*Error) []error {
	var errs []error
	for _, check := range []func() error{
		c.validatePostgres, c.validateSource, c.validateColumns, c.validateRelay, c.validateRetention, c.validateSinks, c.validateClaimCheck, c.validateHTTP, c.validateLog, c.validateTracing,
		c.validateColumnsDistinct, c.validateSinkNamesDistinct,
	} {
		err := check()
		if err == nil {
			continue
		}
		var e *Error
		if errors.As(err, &e) && slices.ContainsFunc(bad, func(b *Error) bool { return under(e.Field, b.Field) || under(b.Field, e.Field) }) {
			continue
		}
		errs = append(errs, err)
	}
	return errs
}

// fail returns an *Error about field, with where its value came from: its
// line (or, for a setting not in the file, the line of the nearest
// mapping that is) or its CDC_* variable.
func (c *Config) fail(field, format string, args ...any) error {
	e := &Error{Field: field, Msg: fmt.Sprintf(format, args...)}
	for p := field; ; p = parentPath(p) {
		if s, ok := c.src[p]; ok {
			e.Line, e.Env = s.line, s.env
			break
		}
		if p == "" {
			break
		}
	}
	return e
}

// q quotes a setting's value for an error, unless it was expanded from
// ${VAR} references, which may hold a secret: then it names the variables.
// (A CDC_* override is quoted: those that are not postgres.url hold no
// secret, and postgres.url is never quoted.)
func (c *Config) q(field, v string) string {
	if s := c.src[field]; len(s.x.vars) > 0 {
		return fromVars(s.x.vars)
	}
	return quote(v)
}

func (c *Config) validatePostgres() error {
	p := c.Postgres
	if err := c.validateURL(); err != nil {
		return err
	}
	if err := c.validateTable("postgres.table", p.Table, ""); err != nil {
		return err
	}
	if err := sqlident.Check(p.Publication); err != nil {
		return c.fail("postgres.publication", "%s is not a usable name: it is %v", c.q("postgres.publication", p.Publication), err)
	}
	if !slotRE.MatchString(p.Slot) {
		return c.fail("postgres.slot", "%s is not a replication slot name: PostgreSQL allows only lower-case letters, digits and _ (at most 63)", c.q("postgres.slot", p.Slot))
	}
	if p.StatusInterval.D() < 100*time.Millisecond {
		return c.fail("postgres.status_interval", "%v is under 100ms", p.StatusInterval.D())
	}
	if d := p.StandbyPoll.D(); d < 100*time.Millisecond || d > time.Minute {
		return c.fail("postgres.standby_poll", "%v is not between 100ms and 1m", d)
	}
	if rb := p.ReceiveBuffer; rb != ReceiveBufferAuto && rb != ReceiveBufferKernel {
		// Under 64 KiB the TCP window can stay smaller than one segment
		// of the WAL sender (up to 32 KiB on loopback), which then sends
		// only on its zero-window probes: the stream crawls.
		if n, err := strconv.Atoi(rb); err != nil || n < 64<<10 || n > 64<<20 {
			return c.fail("postgres.receive_buffer", "%s is not auto, kernel or a number of bytes from 65536 to 67108864", c.q("postgres.receive_buffer", rb))
		}
	}
	if n := p.MaxMessageBytes; n < 1<<20 || n > 1<<30 {
		return c.fail("postgres.max_message_bytes", "%d is not a number of bytes from 1048576 (1 MiB) to 1073741824 (1 GiB)", n)
	}
	if p.HeartbeatInterval != nil && p.HeartbeatInterval.D() < 0 {
		return c.fail("postgres.heartbeat_interval", "%v is negative (0 disables the heartbeat)", p.HeartbeatInterval.D())
	}
	if err := c.validateTable("postgres.state_schema", p.StateSchema+".walpost_sink_progress", " (state_schema is a schema name)"); err != nil {
		return err
	}
	if p.ProgressTable != "-" {
		if err := c.validateTable("postgres.progress_table", p.ProgressTable, ` (or "-" to disable)`); err != nil {
			return err
		}
	}
	if err := c.validateTable("postgres.adopt_table", p.AdoptTable, ""); err != nil {
		return err
	}
	if p.CoverageTable != "-" {
		if err := c.validateTable("postgres.coverage_table", p.CoverageTable, ` (or "-" to keep it in memory only)`); err != nil {
			return err
		}
	}
	for i, r := range p.TrustedOwners {
		if err := sqlident.Check(r); err != nil {
			return c.fail(fmt.Sprintf("postgres.trusted_owners[%d]", i), "%s is not a role name: it is %v", c.q("postgres.trusted_owners", r), err)
		}
	}
	if p.FailoverSlot && p.PrimaryURL != "" {
		return c.fail("postgres.failover_slot", "true with postgres.primary_url: a slot created on a standby cannot be a failover slot (PostgreSQL refuses it); "+
			"set failover_slot: false (a standby's slot survives the standby's promotion: docs/operations.md, \"Decoding from a standby\")")
	}
	if p.GapMargin.D() < 0 {
		return c.fail("postgres.gap_margin", "%v is negative", p.GapMargin.D())
	}
	return c.validateTable("postgres.dead_letter_table", p.DeadLetterTable, "")
}

func (c *Config) validateTable(field, v, hint string) error {
	parts, err := sqlident.Split(v)
	if err != nil {
		return c.fail(field, "%s %v%s", c.q(field, v), err, hint)
	}
	if len(parts) != 2 {
		return c.fail(field, "%s is not schema.table (names as in the catalog, e.g. public.OutboxMessages; quote a name holding a dot: public.\"Outbox.Messages\")%s", c.q(field, v), hint)
	}
	return nil
}

// validateURL checks postgres.url with pgconn.ParseConfig, as connecting
// will. Its error never repeats the URL or a piece of it that could be
// the password.
func (c *Config) validateURL() error {
	if err := c.validateURLOf("postgres.url", &c.Postgres.URL); err != nil {
		return err
	}
	if c.Postgres.PrimaryURL == "" {
		return nil
	}
	if err := c.validateURLOf("postgres.primary_url", &c.Postgres.PrimaryURL); err != nil {
		return err
	}
	if c.Postgres.PrimaryURL == c.Postgres.URL {
		return c.fail("postgres.primary_url", "the same as postgres.url: set primary_url only when url is a standby (PostgreSQL 16+) whose slot the relay reads, "+
			"to the standby's primary; with the slot on the primary, remove primary_url")
	}
	return nil
}

// validateURLOf checks the connection URL *u of field (postgres.url or
// postgres.primary_url) and normalizes it.
func (c *Config) validateURLOf(field string, u0 *string) error {
	u := *u0
	if u == "" {
		return c.fail(field, "empty (set it, or CDC_%s)", strings.ToUpper(strings.ReplaceAll(field, ".", "_")))
	}
	// An ADO.NET string ("Host=…;Password=…") is converted to libpq's
	// keyword/value form: as it is, libpq would send it, password
	// included, to the server as a startup parameter. A '/' in the
	// password that is not %2F is refused: the rest of the password would
	// be read (and shown) as the host, port and database.
	u, err := pgconnect.Normalize(u)
	if err != nil {
		return c.fail(field, "%s", strings.TrimPrefix(strings.TrimPrefix(err.Error(), pgconnect.ErrURL.Error()), ": "))
	}
	*u0 = u
	pc, err := pgconn.ParseConfig(u)
	if err == nil {
		// libpq ends the userinfo at the first '@': the rest of a password
		// with a raw '@' becomes the host, and would be shown by every
		// failed connection.
		hosts := []string{pc.Host}
		for _, f := range pc.Fallbacks {
			hosts = append(hosts, f.Host)
		}
		for _, h := range hosts {
			if strings.Contains(h, "@") {
				return c.fail(field, "the host holds an '@' (write an '@' in the user name or password as %%40); the URL is not repeated here because it may hold a password")
			}
		}
		if _, _, err := pgconnect.KeepAlive(pc.RuntimeParams); err != nil {
			return c.fail(field, "%s", strings.TrimPrefix(strings.TrimPrefix(err.Error(), pgconnect.ErrURL.Error()), ": "))
		}
		return nil
	}
	form, hint := "connection URL", "check its %-escapes, host:port list, ?key=value parameters and sslmode"
	if !strings.HasPrefix(u, "postgres://") && !strings.HasPrefix(u, "postgresql://") {
		form, hint = "connection string", "write a postgres:// URL or host=… dbname=… pairs; check quotes, ports and sslmode"
	}
	why := parseReason(err)
	if why == "" || c.mayQuoteSecret(field, u, why) {
		why = hint
	}
	return c.fail(field, "not a valid %s (%s); the URL is not repeated here because it may hold a password", form, why)
}

// parseReason returns pgconn's reason for refusing a connection string,
// without the (best-effort redacted) string that pgconn's error quotes,
// or "" when it cannot be separated.
func parseReason(err error) string {
	var pe *pgconn.ParseConfigError
	if !errors.As(err, &pe) {
		return ""
	}
	// Error() is "cannot parse `<redacted>`: msg" or "…: msg (inner)";
	// the same error without msg and inner gives the prefix to cut.
	prefix := pgconn.NewParseConfigError(pe.ConnString, "", nil).Error()
	msg, ok := strings.CutPrefix(pe.Error(), prefix)
	if !ok {
		return ""
	}
	inner := pe.Unwrap()
	if inner == nil {
		return msg
	}
	msg, ok = strings.CutSuffix(msg, " ("+inner.Error()+")")
	if !ok {
		return ""
	}
	var ue *url.Error
	if errors.As(inner, &ue) {
		inner = ue.Err // net/url quotes the URL; its cause does not
	}
	switch msg {
	case "failed to parse as URL", "failed to parse as keyword/value":
		return inner.Error()
	}
	return msg + ": " + inner.Error()
}

// mayQuoteSecret reports whether text, about to be shown in an error
// about postgres.url, could hold a piece of the password: any of the parts
// of the URL that redact.URL hides, or of the environment variables that
// went into it, appearing whole (when shorter than 4 bytes) or by any 4
// bytes of it.
func (c *Config) mayQuoteSecret(field, u, text string) bool {
	const window = 4
	suspects := redact.URLSecrets(u)
	s := c.src[field]
	suspects = append(suspects, s.x.values...)
	if s.env != "" {
		suspects = append(suspects, u)
	}
	for _, v := range suspects {
		if len(v) < window {
			if v != "" && strings.Contains(text, v) {
				return true
			}
			continue
		}
		for i := 0; i+window <= len(v); i++ {
			if strings.Contains(text, v[i:i+window]) {
				return true
			}
		}
	}
	return false
}

// columnsAsWritten are the columns: values in role order, before the
// "-" rule (layout.FromConfig) is applied.
func (c *Config) columnsAsWritten() layout.Columns {
	col := c.Columns
	return layout.Columns{col.ID, col.Type, col.Key, col.Payload, col.Headers, col.Time, col.SentAt, col.DeliverAt, col.ExpiresAt}
}

func (c *Config) validateColumns() error {
	for role, v := range c.columnsAsWritten() {
		r := layout.Role(role)
		if r.Optional() && (v == layout.Omit || v == "") {
			continue // the table has no such column, or the role is off
		}
		if err := sqlident.Check(v); err != nil {
			return c.fail(r.Field(), "%s is not a usable column name: it is %v%s", c.q(r.Field(), v), err, r.OmitHint())
		}
	}
	if v := c.Columns.Order; v != "" && v != layout.Omit {
		if err := sqlident.Check(v); err != nil {
			return c.fail("columns.order", "%s is not a usable column name: it is %v (leave it out, or \"-\" for none)", c.q("columns.order", v), err)
		}
	}
	return nil
}

func (c *Config) validateColumnsDistinct() error {
	seen := map[string]string{}
	for role, v := range c.Columns.Layout() {
		r := layout.Role(role)
		if v == "" {
			continue
		}
		if other, dup := seen[v]; dup {
			return c.fail(r.Field(), "column %s is already mapped by %s", c.q(r.Field(), v), other)
		}
		seen[v] = r.Field()
	}
	// The order column may be the time column (a clock_timestamp()
	// default) or the id (ids that sort in insertion order), nothing else.
	if o := c.Columns.Order; o != "" && o != layout.Omit {
		if other, dup := seen[o]; dup && other != layout.Time.Field() && other != layout.ID.Field() {
			return c.fail("columns.order", "column %s is mapped by %s: it does not tell the order rows were inserted in (an identity, bigserial or clock_timestamp() column does)", c.q("columns.order", o), other)
		}
	}
	return nil
}

func (c *Config) validateRelay() error {
	r := c.Relay
	switch {
	case r.WindowMessages < 1 || r.WindowMessages > 10_000_000:
		return c.fail("relay.window_messages", "%d is outside 1..10000000", r.WindowMessages)
	case r.WindowBytes < 1<<16:
		return c.fail("relay.window_bytes", "%d is under 65536", r.WindowBytes)
	case r.BatchSize < 1 || r.BatchSize > 100_000:
		return c.fail("relay.batch_size", "%d is outside 1..100000", r.BatchSize)
	case r.Procs != nil && (*r.Procs < 0 || *r.Procs > 1024):
		return c.fail("relay.procs", "%d is outside 0..1024 (0: every core)", *r.Procs)
	case r.OnInvalid != Stop && !r.OnInvalid.Parks():
		return c.fail("relay.on_invalid", "%s is not %s, %s or %s", c.q("relay.on_invalid", string(r.OnInvalid)), Stop, DeadLetter, HoldKey)
	case r.OnRefused != Stop && !r.OnRefused.Parks():
		return c.fail("relay.on_refused", "%s is not %s, %s or %s", c.q("relay.on_refused", string(r.OnRefused)), Stop, DeadLetter, HoldKey)
	case r.OnExpired != ExpiredDrop && r.OnExpired != ExpiredDeadLetter && r.OnExpired != ExpiredSend:
		return c.fail("relay.on_expired", "%s is not %s, %s or %s", c.q("relay.on_expired", string(r.OnExpired)), ExpiredDrop, ExpiredDeadLetter, ExpiredSend)
	case r.RefusedAttempts < 1 || r.RefusedAttempts > 100:
		return c.fail("relay.refused_attempts", "%d is outside 1..100", r.RefusedAttempts)
	}
	return nil
}

func (c *Config) validateSinks() error {
	if len(c.Sinks) == 0 {
		return c.fail("sinks", "none configured (add at least one, e.g. {name: out, kind: stdout})")
	}
	for i, s := range c.Sinks {
		at := fmt.Sprintf("sinks[%d]", i)
		if s.Name == "" {
			return c.fail(at+".name", "empty")
		}
		if s.Kind == "" {
			return c.fail(at+".kind", "empty (set the kind of sink: file, stdout, kafka, servicebus, …)")
		}
		for _, list := range []struct {
			key      string
			patterns []string
		}{{"include", s.Route.Include}, {"exclude", s.Route.Exclude}} {
			for j, p := range list.patterns {
				if _, err := path.Match(p, ""); err != nil {
					field := fmt.Sprintf("%s.route.%s[%d]", at, list.key, j)
					return c.fail(field, "%s is not a glob pattern (%v)", c.q(field, p), err)
				}
			}
		}
	}
	return nil
}

func (c *Config) validateSinkNamesDistinct() error {
	names := map[string]int{}
	for i, s := range c.Sinks {
		field := fmt.Sprintf("sinks[%d].name", i)
		if j, dup := names[s.Name]; dup {
			return c.fail(field, "%s is also the name of sinks[%d]", c.q(field, s.Name), j)
		}
		names[s.Name] = i
	}
	return nil
}

// validateHTTP checks http.auth: basic (username and password) or
// bearer_token, one or the other; and the console's tokens. No error
// quotes a value.
func (c *Config) validateHTTP() error {
	if c.UnresolvedUnder("http") {
		return nil // a command that does not use it, with a ${VAR} unset (LoadFor)
	}
	if err := c.validateConsole(); err != nil {
		return err
	}
	a := c.HTTP.Auth
	if a == nil {
		return nil
	}
	basic := a.Username != "" || a.Password != ""
	switch {
	case basic && a.BearerToken != "":
		return c.fail("http.auth", "set username and password (basic authentication) or bearer_token, not both")
	case a.BearerToken != "":
		return nil
	case a.Username == "" && a.Password == "":
		return c.fail("http.auth", "empty: set username and password (basic authentication) or bearer_token, or remove http.auth (an empty ${VAR}?)")
	case a.Username == "":
		return c.fail("http.auth.username", "empty: basic authentication needs username and password")
	case a.Password == "":
		return c.fail("http.auth.password", "empty: basic authentication needs username and password")
	case strings.Contains(a.Username, ":"):
		return c.fail("http.auth.username", "contains ':', which basic authentication cannot carry in a user name")
	}
	return nil
}

// minConsoleToken is the shortest http.view_token or http.operate_token.
const minConsoleToken = 16

// validateConsole checks http.console and its tokens: tokens only with
// the console, each long enough and the two different, and an operate
// token (or http.auth) when the listener is not on a loopback address.
func (c *Config) validateConsole() error {
	h := c.HTTP
	if !h.Console {
		for _, t := range []struct{ field, v string }{{"http.view_token", h.ViewToken}, {"http.operate_token", h.OperateToken}} {
			if t.v != "" {
				return c.fail(t.field, "set, but http.console is off: set http.console: true, or remove it")
			}
		}
		return nil
	}
	for _, t := range []struct{ field, v string }{{"http.view_token", h.ViewToken}, {"http.operate_token", h.OperateToken}} {
		if t.v != "" && len(t.v) < minConsoleToken {
			return c.fail(t.field, "shorter than %d bytes: use a random token (openssl rand -hex 16)", minConsoleToken)
		}
	}
	if h.ViewToken != "" && h.ViewToken == h.OperateToken {
		return c.fail("http.view_token", "the same as http.operate_token: a viewer could act; use two tokens")
	}
	if h.Listen == "" {
		return c.fail("http.console", "on, but http.listen is empty: the console is served on the HTTP listener")
	}
	host, _, err := net.SplitHostPort(h.Listen)
	local := err == nil && host != "" && pgconnect.IsLocal(host)
	if !local && h.OperateToken == "" && h.Auth == nil {
		return c.fail("http.operate_token", "empty, and http.listen %q is not a loopback address: anyone who reaches the port could resend and drop messages; set http.operate_token (and http.view_token for viewers) or listen on 127.0.0.1", h.Listen)
	}
	return nil
}

func (c *Config) validateLog() error {
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		return c.fail("log.level", "%s is not one of debug, info, warn, error", c.q("log.level", c.Log.Level))
	}
	switch c.Log.Format {
	case "json", "console":
	default:
		return c.fail("log.format", "%s is not json or console", c.q("log.format", c.Log.Format))
	}
	return nil
}
