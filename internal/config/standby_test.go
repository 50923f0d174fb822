package config

import (
	"slices"
	"strings"
	"testing"
)

// TestPrimaryURLSendsStateToThePrimaryAndIsRefusedWhenItIsURL:
// postgres.primary_url is where state goes (StateURL) when set, url
// otherwise; it is checked like url, refused when it is url itself,
// settable by CDC_POSTGRES_PRIMARY_URL, and its password is a secret.
func TestPrimaryURLSendsStateToThePrimaryAndIsRefusedWhenItIsURL(t *testing.T) {
	c, err := Parse([]byte(minimal), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.Postgres.FromStandby() || c.Postgres.StateURL() != c.Postgres.URL {
		t.Fatalf("without primary_url: FromStandby %v, StateURL %q", c.Postgres.FromStandby(), c.Postgres.StateURL())
	}
	y := strings.Replace(minimal, "postgres:\n", "postgres:\n  primary_url: postgres://u:s3cretpw@primary/db\n", 1)
	c, err = Parse([]byte(y), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Postgres.FromStandby() || c.Postgres.StateURL() != "postgres://u:s3cretpw@primary/db" {
		t.Fatalf("with primary_url: FromStandby %v, StateURL %q", c.Postgres.FromStandby(), c.Postgres.StateURL())
	}
	if !slices.Contains(c.Secrets(), "s3cretpw") {
		t.Errorf("the password of primary_url is not among the secrets: %q", c.Secrets())
	}
	c, err = Parse([]byte(minimal), env(map[string]string{"CDC_POSTGRES_PRIMARY_URL": "postgres://u@p2/db"}))
	if err != nil || c.Postgres.PrimaryURL != "postgres://u@p2/db" {
		t.Fatalf("CDC_POSTGRES_PRIMARY_URL: %v, primary_url %q", err, c.Postgres.PrimaryURL)
	}
	for bad, want := range map[string]string{
		"postgres://u@h/db":               "the same as postgres.url",
		"postgres://u:pw@h:notaport/db":   "not a valid connection URL",
		"host=h port=5432 sslmode=bogus1": "not a valid connection string",
	} {
		y := strings.Replace(minimal, "postgres:\n", "postgres:\n  primary_url: "+bad+"\n", 1)
		_, err := Parse([]byte(y), env(nil))
		if err == nil || !strings.Contains(err.Error(), "postgres.primary_url") || !strings.Contains(err.Error(), want) {
			t.Errorf("primary_url %s: %v, want an error naming postgres.primary_url saying %q", bad, err, want)
		}
	}
}
