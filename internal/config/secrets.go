package config

import (
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walpost/walpost/internal/redact"
)

// Secrets returns every secret value the configuration holds, for a
// redact.Set: the password of postgres.url as written and decoded (and
// what else redact.URL would hide in it), the password pgconn would use
// (which may come from PGPASSWORD or a password file), the whole URL when
// pgconn cannot parse it, and from each sink every value under a key that
// redact.IsSecretKey (sasl.password, connection_string with its
// SharedAccessKey, token, …) and the password of any URL among its other
// values, http.auth's password and bearer_token, and http.view_token and
// http.operate_token. Each value appears
// once; empty ones are left out.
func (c *Config) Secrets() []string {
	var out []string
	seen := map[string]bool{}
	add := func(ss ...string) {
		for _, s := range ss {
			if s != "" && !seen[s] {
				seen[s] = true
				out = append(out, s)
			}
		}
	}
	for _, u := range []string{c.Postgres.URL, c.Postgres.PrimaryURL} {
		if u == "" {
			continue
		}
		add(redact.URLSecrets(u)...)
		if pc, err := pgconn.ParseConfig(u); err == nil {
			add(pc.Password)
		} else {
			add(u)
		}
	}
	add(c.Postgres.MessageKeys...)
	for i := range c.Sinks {
		add(c.Sinks[i].secrets()...)
	}
	if a := c.HTTP.Auth; a != nil {
		add(a.Password, a.BearerToken)
	}
	add(c.HTTP.ViewToken, c.HTTP.OperateToken)
	if t := c.Tracing; t != nil {
		for _, v := range t.Headers {
			add(v)
		}
	}
	if cc := c.Relay.ClaimCheck; cc != nil && cc.ConnectionString != "" {
		add(cc.ConnectionString)
		add(redact.ConnectionStringSecrets(cc.ConnectionString)...)
		add(accountKeys(cc.ConnectionString)...)
	}
	for i := range c.Sinks {
		if cc := c.Sinks[i].ClaimCheck; cc != nil && cc.ConnectionString != "" {
			add(accountKeys(cc.ConnectionString)...)
		}
	}
	return out
}

// accountKeys returns the AccountKey and SharedAccessSignature values of
// an Azure Storage connection string (claim_check.connection_string).
func accountKeys(cs string) []string {
	var out []string
	for _, part := range strings.Split(cs, ";") {
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			continue
		}
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "accountkey", "sharedaccesssignature":
			if v = strings.TrimSpace(v); v != "" {
				out = append(out, v)
			}
		}
	}
	return out
}
