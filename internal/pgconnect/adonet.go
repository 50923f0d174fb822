package pgconnect

import (
	"cmp"
	"fmt"
	"regexp"
	"strings"
)

// ErrADONET is wrapped by the errors of an ADO.NET (Npgsql) connection
// string that FromADONET cannot convert.
var ErrADONET = fmt.Errorf("%w: it is a .NET (ADO.NET) connection string", ErrURL)

// adoNetKeys maps the keys of an Npgsql connection string, lower-cased and
// without spaces or underscores (Npgsql ignores case, and spells several
// keys with and without spaces), to libpq keywords. Npgsql's aliases are
// listed: Server for Host, DB for Database, User ID, UserId, User Name and
// UID for Username, PSW and PWD for Password.
var adoNetKeys = map[string]string{
	"host": "host", "server": "host",
	"port":     "port",
	"database": "dbname", "db": "dbname",
	"username": "user", "userid": "user", "user": "user", "uid": "user",
	"password": "password", "psw": "password", "pwd": "password",
	"passfile":                  "passfile",
	"sslmode":                   "sslmode",
	"rootcertificate":           "sslrootcert",
	"sslcertificate":            "sslcert",
	"sslkey":                    "sslkey",
	"sslpassword":               "sslpassword",
	"timeout":                   "connect_timeout",
	"applicationname":           "application_name",
	"targetsessionattributes":   "target_session_attrs",
	"options":                   "options",
	"keepalive":                 "keepalives_idle", // seconds; libpq's TCP keepalive (keepalive.go)
	"tcpkeepalive":              "keepalives",
	"trustservercertificate":    trustServerCertificate,
	"kerberosservicename":       "krbsrvname",
	"krbsrvname":                "krbsrvname",
	"gssencmode":                "gssencmode",
	"channelbinding":            "channel_binding",
	"requireauth":               "require_auth",
	"loadbalancehosts":          "load_balance_hosts",
	"searchpath":                "search_path", // sent as options=-csearch_path=…
	"clientencoding":            "client_encoding",
	"commandtimeout":            "", // Npgsql's own: no libpq equivalent, left out
	"pooling":                   "",
	"minimumpoolsize":           "",
	"minpoolsize":               "",
	"maximumpoolsize":           "",
	"maxpoolsize":               "",
	"connectionidlelifetime":    "",
	"connectionpruninginterval": "",
	"connectionlifetime":        "",
	"includeerrordetail":        "",
	"includeerrordetails":       "",
	"enlist":                    "",
	"maxautoprepare":            "",
	"autoprepareminusages":      "",
	"noresetonclose":            "",
	"multiplexing":              "",
	"writecoalescingbuffersize": "",
	"readbuffersize":            "",
	"writebuffersize":           "",
	"internalcommandtimeout":    "",
	"cancellationtimeout":       "",
	"persistsecurityinfo":       "",
	"logparameters":             "",
	"encoding":                  "",
	"timezone":                  "",
}

// trustServerCertificate stands for Npgsql's Trust Server Certificate in
// adoNetKeys: libpq has no such key. Its sslmode prefer and require (the
// default is prefer) already encrypt without verifying the certificate,
// which is what Trust Server Certificate=true asks, so it is left out
// there; with verify-ca or verify-full it contradicts the SSL Mode and is
// refused, naming the key to drop or the mode to use.
const trustServerCertificate = "(trust server certificate)"

// adoNetSSLModes maps Npgsql's SSL Mode values (lower case) to libpq's.
var adoNetSSLModes = map[string]string{
	"disable": "disable", "allow": "allow", "prefer": "prefer", "require": "require",
	"verifyca": "verify-ca", "verify-ca": "verify-ca", "verifyfull": "verify-full", "verify-full": "verify-full",
}

// IsADONET reports whether s looks like an ADO.NET connection string
// ("Host=db;Port=5432;Username=app;Password=…"): not a URL, its first key
// one Npgsql knows, and its first value running to a ';' where a libpq
// keyword/value string would have a space and the next keyword. libpq
// reads such a string as one pair whose keyword is not a libpq one, and
// would send it, password included, to the server as a startup parameter.
func IsADONET(s string) bool {
	if strings.Contains(s, "://") {
		return false
	}
	k, rest, ok := strings.Cut(s, "=")
	if !ok {
		return false
	}
	if _, known := adoNetKeys[normKey(k)]; !known {
		return false
	}
	first, _, semi := strings.Cut(rest, ";")
	return semi && !nextKeyword.MatchString(first)
}

// nextKeyword matches the start of a second libpq keyword=value pair.
var nextKeyword = regexp.MustCompile(`\s[A-Za-z_]+\s*=`)

// Normalize returns postgres.url as libpq reads it: an ADO.NET connection
// string converted (FromADONET), anything else unchanged. It refuses,
// with an error wrapping ErrURL that never repeats the URL, a postgres://
// URL whose user name or password holds an unescaped '/': libpq would end
// the host there and read the rest of the password as the port, the
// database name or the host.
func Normalize(s string) (string, error) {
	if IsADONET(s) {
		return FromADONET(s)
	}
	if err := checkUserinfo(s); err != nil {
		return "", err
	}
	return s, nil
}

// checkUserinfo refuses a postgres:// URL with an '@' after the first '/'
// of its authority (before any '?'): a '/' in the user name or password
// that is not written %2F.
func checkUserinfo(s string) error {
	rest, ok := strings.CutPrefix(s, "postgres://")
	if !ok {
		if rest, ok = strings.CutPrefix(s, "postgresql://"); !ok {
			return nil
		}
	}
	rest, _, _ = strings.Cut(rest, "?")
	slash := strings.IndexByte(rest, '/')
	if slash >= 0 && strings.Contains(rest[slash:], "@") {
		return fmt.Errorf("%w: an '@' follows a '/': a '/' in the user name or password must be written %%2F (and an '@' as %%40), "+
			"else the rest of the password is read as the host, port and database (the URL is not repeated: it may hold a password)", ErrURL)
	}
	return nil
}

// FromADONET converts s, an ADO.NET (Npgsql) connection string, to a
// libpq keyword/value string with the same meaning: Host (or Server, a
// comma-separated list of hosts, each with an optional :port), Port,
// Database, Username (User ID, …), Password, SSL Mode (Disable … VerifyFull,
// to disable … verify-full), Root Certificate, SSL Certificate, SSL Key,
// SSL Password, Timeout (connect_timeout), Application Name, Target
// Session Attributes, Search Path, Options, Passfile and Kerberos Service
// Name; Npgsql's pooling and command settings, which have no libpq
// equivalent, are left out. Values may be quoted with ' or " (a doubled
// quote is one quote), as ADO.NET allows. An unknown key, a key given
// twice, a value that does not parse or an unknown SSL Mode is an error
// wrapping ErrADONET that names the key but never a value.
func FromADONET(s string) (string, error) {
	pairs, err := splitADONET(s)
	if err != nil {
		return "", err
	}
	seen := map[string]string{}
	var out []string
	var hostVal, portVal, searchPath, options, sslMode, trust string
	for _, p := range pairs {
		kw, known := adoNetKeys[normKey(p.key)]
		if !known {
			return "", fmt.Errorf("%w, and its key %q has no libpq equivalent: write postgres.url as a postgres:// URL "+
				"(postgres://user:password@host:5432/database?sslmode=verify-full)", ErrADONET, strings.TrimSpace(p.key))
		}
		if kw == "" {
			continue
		}
		if first, dup := seen[kw]; dup {
			return "", fmt.Errorf("%w: %q and %q set the same setting", ErrADONET, first, strings.TrimSpace(p.key))
		}
		seen[kw] = strings.TrimSpace(p.key)
		v := p.value
		switch kw {
		case trustServerCertificate:
			switch strings.ToLower(strings.TrimSpace(v)) {
			case "true", "yes":
				trust = strings.TrimSpace(p.key)
			case "false", "no":
			default:
				return "", fmt.Errorf("%w: its %s is not true or false", ErrADONET, strings.TrimSpace(p.key))
			}
			continue
		case "host":
			hostVal = v
			continue
		case "port":
			portVal = v
			continue
		case "search_path":
			searchPath = v
			continue
		case "options":
			options = v
			continue
		case "sslmode":
			m, ok := adoNetSSLModes[strings.ToLower(strings.ReplaceAll(strings.TrimSpace(v), " ", ""))]
			if !ok {
				return "", fmt.Errorf("%w: its SSL Mode is not one of Disable, Allow, Prefer, Require, VerifyCA, VerifyFull", ErrADONET)
			}
			v, sslMode = m, m
		case "keepalives":
			if strings.EqualFold(v, "true") {
				v = "1"
			} else {
				v = "0"
			}
		}
		out = append(out, kw+"="+quoteKV(v))
	}
	if trust != "" && strings.HasPrefix(sslMode, "verify-") {
		return "", fmt.Errorf("%w, and its %s=true contradicts its SSL Mode (%s verifies the server's certificate): "+
			"drop %s to keep verifying (give Root Certificate=<the CA's file> if the server's CA is not trusted by the system), "+
			"or set SSL Mode=Require to encrypt without verifying the certificate, as %s=true asks", ErrADONET, trust, sslMode, trust, trust)
	}
	out = append(adoNetAddr(hostVal, portVal), out...)
	if searchPath != "" {
		options = strings.TrimSpace(options + " -csearch_path=" + strings.ReplaceAll(searchPath, " ", `\ `))
	}
	if options != "" {
		out = append(out, "options="+quoteKV(options))
	}
	return strings.Join(out, " "), nil
}

// adoNetAddr is the host= and port= of an ADO.NET Host (hosts separated
// by commas, each with its own :port or [IPv6]:port) and Port (the port of
// the hosts that name none).
func adoNetAddr(hostVal, portVal string) []string {
	var addr []string
	if hostVal != "" {
		var hosts, ports []string
		perHost := false
		for _, h := range strings.Split(hostVal, ",") {
			h = strings.TrimSpace(h)
			port := ""
			if strings.HasPrefix(h, "[") { // [IPv6]:port
				if i := strings.Index(h, "]:"); i >= 0 {
					h, port = h[1:i], h[i+2:]
				} else {
					h = strings.Trim(h, "[]")
				}
			} else if strings.Count(h, ":") == 1 {
				h, port, _ = strings.Cut(h, ":")
			}
			perHost = perHost || port != ""
			hosts = append(hosts, h)
			ports = append(ports, port)
		}
		addr = append(addr, "host="+quoteKV(strings.Join(hosts, ",")))
		if perHost {
			for i := range ports {
				if ports[i] == "" {
					ports[i] = cmp.Or(portVal, "5432")
				}
			}
			addr = append(addr, "port="+quoteKV(strings.Join(ports, ",")))
		} else if portVal != "" {
			addr = append(addr, "port="+quoteKV(portVal))
		}
	} else if portVal != "" {
		addr = append(addr, "port="+quoteKV(portVal))
	}
	return addr
}

// kv is one key=value pair of an ADO.NET connection string.
type kv struct{ key, value string }

// splitADONET splits an ADO.NET connection string into its pairs:
// key=value separated by ';', a value optionally quoted with ' or " (a
// doubled quote inside is one quote). Its errors never hold a value.
func splitADONET(s string) ([]kv, error) {
	var out []kv
	for i := 0; i < len(s); {
		for i < len(s) && (s[i] == ';' || s[i] == ' ' || s[i] == '\t') {
			i++
		}
		if i == len(s) {
			break
		}
		eq := strings.IndexByte(s[i:], '=')
		if eq < 0 {
			return nil, fmt.Errorf("%w, and a part of it is not key=value (the string is not repeated here because it may hold a password)", ErrADONET)
		}
		key := s[i : i+eq]
		if strings.ContainsAny(key, ";\"'") || strings.TrimSpace(key) == "" {
			return nil, fmt.Errorf("%w, and a part of it is not key=value (the string is not repeated here because it may hold a password)", ErrADONET)
		}
		i += eq + 1
		for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
			i++
		}
		var v strings.Builder
		if i < len(s) && (s[i] == '\'' || s[i] == '"') {
			q := s[i]
			i++
			closed := false
			for i < len(s) {
				if s[i] == q {
					if i+1 < len(s) && s[i+1] == q {
						v.WriteByte(q)
						i += 2
						continue
					}
					i++
					closed = true
					break
				}
				v.WriteByte(s[i])
				i++
			}
			if !closed {
				return nil, fmt.Errorf("%w, and the value of %q has no closing quote", ErrADONET, strings.TrimSpace(key))
			}
			for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
				i++
			}
			if i < len(s) && s[i] != ';' {
				return nil, fmt.Errorf("%w, and the quoted value of %q is followed by more than a ';'", ErrADONET, strings.TrimSpace(key))
			}
		} else {
			j := strings.IndexByte(s[i:], ';')
			if j < 0 {
				j = len(s) - i
			}
			v.WriteString(strings.TrimSpace(s[i : i+j]))
			i += j
		}
		out = append(out, kv{key, v.String()})
	}
	return out, nil
}

// normKey is an ADO.NET key as looked up in adoNetKeys: lower case,
// without spaces or underscores.
func normKey(k string) string {
	return strings.NewReplacer(" ", "", "_", "", "\t", "").Replace(strings.ToLower(strings.TrimSpace(k)))
}

// quoteKV quotes v as a libpq keyword/value string value.
func quoteKV(v string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}
