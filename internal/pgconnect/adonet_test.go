package pgconnect

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestADONETConnectionStringIsConverted: an Npgsql connection string,
// with Npgsql's keys and their aliases in any case and spacing, quoted
// values and pooling settings, connects where it says (host, port,
// database, user, password, TLS) and sends no startup parameter of its
// own: the string, password included, never reaches the server as one.
func TestADONETConnectionStringIsConverted(t *testing.T) {
	for _, c := range []struct {
		name, s                  string
		host                     string
		port                     uint16
		db, user, pw             string
		tls, verify, fallbacks   bool
		moreHosts                []string
		app, timeoutS, searchOpt string
	}{
		{name: "the documented keys",
			s:    "Host=db.example.com;Port=5433;Database=app;Username=walpost;Password=s3cret;SSL Mode=VerifyFull",
			host: "db.example.com", port: 5433, db: "app", user: "walpost", pw: "s3cret", tls: true, verify: true},
		{name: "aliases, case and spaces",
			s:    "server = db.example.com ; PORT=5432; DB=app; User ID=walpost; PWD=s3cret; sslmode=Disable; Pooling=true; Maximum Pool Size=20; Command Timeout=30; Timeout=7",
			host: "db.example.com", port: 5432, db: "app", user: "walpost", pw: "s3cret", timeoutS: "7"},
		{name: "User Name and UID",
			s:    "Host=h;User Name=u1;Password=p;SslMode=Require",
			host: "h", port: 5432, user: "u1", pw: "p", tls: true},
		{name: "quoted values with ; and quotes",
			s:    `Host=h;Username='we;ird';Password="pa;ss""word'x";Application Name=billing;Search Path=app,public`,
			host: "h", port: 5432, user: "we;ird", pw: `pa;ss"word'x`, app: "billing", searchOpt: "-csearch_path=app,public", tls: true},
		{name: "a host list with ports",
			s:    "Host=h1:5433,h2;Port=5434;Username=u;Password=p;Target Session Attributes=read-write",
			host: "h1", port: 5433, user: "u", pw: "p", moreHosts: []string{"h2:5434"}, tls: true},
		{name: "a password with '/' and '@'",
			s:    "Host=h;Username=u;Password=a/b@c d",
			host: "h", port: 5432, user: "u", pw: "a/b@c d", tls: true},
	} {
		if !IsADONET(c.s) {
			t.Errorf("%s: IsADONET = false", c.name)
			continue
		}
		cfg, err := Config(c.s)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		pc := cfg.Config
		if pc.Host != c.host || pc.Port != c.port || pc.Database != c.db && c.db != "" || pc.User != c.user || pc.Password != c.pw {
			t.Errorf("%s: host %q port %d db %q user %q password %q, want %q %d %q %q %q", c.name, pc.Host, pc.Port, pc.Database, pc.User, pc.Password, c.host, c.port, c.db, c.user, c.pw)
		}
		for k, v := range pc.RuntimeParams {
			if k != "application_name" && k != "options" || strings.Contains(v, c.pw) {
				t.Errorf("%s: startup parameter %q would be sent to the server", c.name, k)
			}
		}
		if c.app != "" && pc.RuntimeParams["application_name"] != c.app {
			t.Errorf("%s: application_name %q, want %q", c.name, pc.RuntimeParams["application_name"], c.app)
		}
		if c.searchOpt != "" && pc.RuntimeParams["options"] != c.searchOpt {
			t.Errorf("%s: options %q, want %q", c.name, pc.RuntimeParams["options"], c.searchOpt)
		}
		if c.timeoutS != "" && pc.ConnectTimeout.String() != c.timeoutS+"s" {
			t.Errorf("%s: connect timeout %s, want %ss", c.name, pc.ConnectTimeout, c.timeoutS)
		}
		if (pc.TLSConfig != nil) != c.tls || c.verify && (pc.TLSConfig.InsecureSkipVerify || pc.TLSConfig.ServerName != c.host) {
			t.Errorf("%s: TLS %+v, want on %v, verifying %v", c.name, pc.TLSConfig != nil, c.tls, c.verify)
		}
		var more []string
		for _, f := range pc.Fallbacks {
			if f.Host != pc.Host || f.Port != pc.Port {
				s := f.Host + ":" + itoa(f.Port)
				if len(more) == 0 || more[len(more)-1] != s {
					more = append(more, s)
				}
			}
		}
		if strings.Join(more, " ") != strings.Join(c.moreHosts, " ") {
			t.Errorf("%s: other hosts %v, want %v", c.name, more, c.moreHosts)
		}
	}
}

func itoa(p uint16) string { return strconv.Itoa(int(p)) }

// TestADONETFileKeys: the keys naming files map to libpq's ssl* keywords.
func TestADONETFileKeys(t *testing.T) {
	got, err := FromADONET("Host=h;Root Certificate=/etc/ca.pem;SSL Certificate=/c.pem;SSL Key=/k.pem;SSL Password=kp;Passfile=/pgpass;Kerberos Service Name=pg")
	want := `host='h' sslrootcert='/etc/ca.pem' sslcert='/c.pem' sslkey='/k.pem' sslpassword='kp' passfile='/pgpass' krbsrvname='pg'`
	if err != nil || got != want {
		t.Errorf("FromADONET = %q, %v; want %q", got, err, want)
	}
}

// TestADONETErrorsNameTheKeyNeverAValue: an Npgsql string that cannot be
// converted is refused (wrapping ErrADONET and ErrURL) naming the key at
// fault, never a value; libpq strings and URLs are not taken for one.
func TestADONETErrorsNameTheKeyNeverAValue(t *testing.T) {
	for _, c := range []struct{ s, want string }{
		{"Host=h;Password=s3cretpw;Frobnicate=s3cretpw", `key "Frobnicate" has no libpq equivalent`},
		{"Host=h;Password=s3cretpw;Pwd=s3cretpw", `"Password" and "Pwd" set the same setting`},
		{"Host=h;Password='s3cretpw", `the value of "Password" has no closing quote`},
		{"Host=h;Password=s3cretpw;SSL Mode=s3cretpw", "SSL Mode is not one of"},
		{"Host=h;s3cretpw;Password=x", "not key=value"},
	} {
		_, err := Config(c.s)
		if !errors.Is(err, ErrADONET) || !errors.Is(err, ErrURL) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%q: %v, want ErrADONET saying %q without the password", c.s, err, c.want)
		}
	}
	for _, s := range []string{"host=h password='a;b' dbname=d", "host=h dbname=d;x", "postgres://u:p@h/db?options=a;b", "dbname=d", ""} {
		if IsADONET(s) {
			t.Errorf("IsADONET(%q) = true", s)
		}
	}
	if _, err := pgconn.ParseConfig("Host=h;Password=s3cret"); err != nil {
		t.Fatal(err) // as the bug was: libpq takes it for one startup parameter
	}
}

// TestSlashInPasswordIsRefused: a postgres:// URL whose password holds an
// unescaped '/' is refused with ErrURL, saying to write %2F, and the
// error holds no piece of the password; %2F works.
func TestSlashInPasswordIsRefused(t *testing.T) {
	for _, u := range []string{
		"postgres://walpost:1234/secretpart@db.example.com/app",
		"postgresql://walpost:pa/ss@db.example.com:5432/app?sslmode=require",
		"postgres://walpost:s3cr/et@/app?host=/var/run/postgresql",
	} {
		_, err := Config(u)
		if !errors.Is(err, ErrURL) || !strings.Contains(err.Error(), "%2F") ||
			strings.Contains(err.Error(), "secretpart") || strings.Contains(err.Error(), "ss@") || strings.Contains(err.Error(), "s3cr") || strings.Contains(err.Error(), "db.example") {
			t.Errorf("%q: %v, want ErrURL saying %%2F and quoting nothing", u, err)
		}
	}
	c, err := Config("postgres://walpost:pa%2Fss@db.example.com/app")
	if err != nil || c.Password != "pa/ss" || c.Host != "db.example.com" {
		t.Errorf("%%2F: %v, password %q host %q", err, c.Password, c.Host)
	}
}
