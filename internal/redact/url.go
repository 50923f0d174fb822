package redact

import (
	"slices"
	"strings"
)

// Mask is what a hidden secret is replaced with.
const Mask = "xxxxx"

const (
	unparseableKV     = "<unparseable connection string>"
	cut               = "…"
	userinfoSafeChars = "-._~!$&'()*+,;=%"
	hostSafeChars     = "-._~%"
	pathSafeChars     = "-._~!$&'()*+,;=:@%"
	querySafeChars    = "-._~!$'()*+,;:@/%"
	keywordSafeChars  = "_"
)

// URL returns s, a libpq connection string, with every password replaced by
// Mask, for showing in errors and logs. s may be a URL
// (postgres://user:password@host:5432/db?sslmode=require, postgresql://…)
// or a key/value string (host=h user=u password='a b'). Hidden are the
// userinfo password, the value of a query parameter (and the parameters
// after it, where an unescaped '&' of the password may have put a piece of
// it) or keyword whose name IsSecretKey (password, sslpassword), and
// whatever part of a malformed
// string cannot be read for sure: everything between the first ':' of the
// userinfo and the last '@' (a password with an unescaped '@', '/' or '?'
// in it), the rest of a URL after a host list that is not one, the rest of
// a key/value string after an unterminated quote; "…" stands for a cut
// rest. When not even the start can be read (neither scheme:// nor
// keyword=), URL returns "<unparseable connection string>". It never
// returns a password, however malformed s is.
func URL(s string) string {
	out, _ := scanConn(s)
	return out
}

// URLSecrets returns what URL hides in s: each hidden part as written and,
// where it differs, decoded (percent-escapes for a URL, quotes and
// backslashes for a key/value string), so that a Set finds the password in
// either form. Parts may overlap; empty ones are left out.
func URLSecrets(s string) []string {
	_, secrets := scanConn(s)
	return secrets
}

// scanner builds the redacted string and collects what it hid.
type scanner struct {
	b       strings.Builder
	secrets []string
}

// hide writes Mask in place of raw and records raw and its other forms.
func (sc *scanner) hide(raw string, forms ...string) {
	sc.b.WriteString(Mask)
	sc.keep(raw)
	sc.keep(forms...)
}

// cut ends the output at a part that cannot be read: the rest, raw, is
// hidden.
func (sc *scanner) cut(raw string) {
	sc.b.WriteString(cut)
	sc.keep(raw)
}

func (sc *scanner) keep(ss ...string) {
	for _, s := range ss {
		if s != "" && !slices.Contains(sc.secrets, s) {
			sc.secrets = append(sc.secrets, s)
		}
	}
}

func scanConn(s string) (string, []string) {
	if i := strings.Index(s, "://"); i >= 0 && isScheme(s[:i]) {
		return scanURI(s[:i], s[i+3:])
	}
	return scanKeywordValue(s)
}

// isScheme reports whether s is an RFC 3986 scheme.
func isScheme(s string) bool {
	if s == "" || !isAlpha(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !isAlpha(c) && !isDigit(c) && c != '+' && c != '-' && c != '.' {
			return false
		}
	}
	return true
}

func scanURI(scheme, rest string) (string, []string) {
	var sc scanner
	sc.b.WriteString(scheme)
	sc.b.WriteString("://")

	// Userinfo. libpq ends it at the first '@' before the first '/', so a
	// password with an unescaped '@' or '/' is read wrong (and a piece of
	// it lands in the host or the path); here everything from the first
	// ':' to the last '@' is taken as the password, whatever it holds.
	if at := strings.LastIndexByte(rest, '@'); at >= 0 && strings.Contains(rest[:at], ":") {
		info := rest[:at]
		user, pw, _ := strings.Cut(info, ":")
		if safe(user, userinfoSafeChars) {
			sc.b.WriteString(user)
			sc.b.WriteByte(':')
			sc.hide(pw, percentDecode(pw))
		} else {
			sc.hide(info, percentDecode(info))
		}
		sc.b.WriteByte('@')
		rest = rest[at+1:]
	} else if i := strings.IndexAny(rest, "@/"); i >= 0 && rest[i] == '@' {
		if user := rest[:i]; safe(user, userinfoSafeChars) {
			sc.b.WriteString(user)
		} else {
			sc.hide(user, percentDecode(user))
		}
		sc.b.WriteByte('@')
		rest = rest[i+1:]
	}

	// Host list: host[:port][,host[:port]]…
	end := strings.IndexAny(rest, "/?")
	if end < 0 {
		end = len(rest)
	}
	if !validHostList(rest[:end]) {
		sc.cut(rest)
		return sc.b.String(), sc.secrets
	}
	sc.b.WriteString(rest[:end])
	rest = rest[end:]

	// Database name.
	if strings.HasPrefix(rest, "/") {
		db := rest[1:]
		if i := strings.IndexByte(db, '?'); i >= 0 {
			db = db[:i]
		}
		if !safe(db, pathSafeChars) {
			sc.b.WriteByte('/')
			sc.cut(rest[1:])
			return sc.b.String(), sc.secrets
		}
		sc.b.WriteString(rest[:1+len(db)])
		rest = rest[1+len(db):]
	}

	// Query parameters. A password with an unescaped '&' in it runs on
	// into what looks like more parameters, so everything after a secret
	// parameter's '=' is hidden.
	if strings.HasPrefix(rest, "?") {
		sc.b.WriteByte('?')
		query := rest[1:]
		for i := 0; query != ""; i++ {
			pair, next, _ := strings.Cut(query, "&")
			if i > 0 {
				sc.b.WriteByte('&')
			}
			k, v, ok := strings.Cut(pair, "=")
			switch {
			case !ok || strings.Contains(v, "=") || !safe(k, querySafeChars):
				// Not key=value: a mangled "password…" is as likely as anything.
				sc.hide(pair, percentDecode(pair))
			case IsSecretKey(percentDecode(k)):
				sc.b.WriteString(k)
				sc.b.WriteByte('=')
				v = query[len(k)+1:]
				sc.hide(v, percentDecode(v))
				sc.keep(pair[len(k)+1:], percentDecode(pair[len(k)+1:]))
				next = ""
			case !safe(v, querySafeChars):
				sc.b.WriteString(k)
				sc.b.WriteByte('=')
				sc.hide(v, percentDecode(v))
			default:
				sc.b.WriteString(pair)
			}
			query = next
		}
	}
	return sc.b.String(), sc.secrets
}

// validHostList reports whether s is a comma-separated list of host[:port]
// or [ipv6][:port], each part made of characters a host name or address
// has (percent-escapes allowed, for socket directories) and the port of
// digits.
func validHostList(s string) bool {
	for _, h := range strings.Split(s, ",") {
		host, port := h, ""
		if strings.HasPrefix(h, "[") {
			end := strings.IndexByte(h, ']')
			if end < 0 || !safe(h[1:end], hostSafeChars+":") {
				return false
			}
			host, port = "", h[end+1:]
			if port != "" {
				if port[0] != ':' {
					return false
				}
				port = port[1:]
			}
		} else if i := strings.IndexByte(h, ':'); i >= 0 {
			host, port = h[:i], h[i+1:]
		}
		if !safe(host, hostSafeChars) {
			return false
		}
		for i := 0; i < len(port); i++ {
			if !isDigit(port[i]) {
				return false
			}
		}
	}
	return true
}

// scanKeywordValue reads s as libpq's key/value form: keyword = value
// pairs separated by white space, a value either a run of non-space bytes
// or single-quoted, a backslash taking the next byte literally in both.
func scanKeywordValue(s string) (string, []string) {
	var sc scanner
	s = trimSpace(s)
	pairs := 0
	for s != "" {
		i := 0
		for i < len(s) && s[i] != '=' && !isSpace(s[i]) {
			i++
		}
		key, rest := s[:i], trimSpace(s[i:])
		if key == "" || !safe(key, keywordSafeChars) || !strings.HasPrefix(rest, "=") {
			if pairs == 0 {
				sc.keep(s)
				return unparseableKV, sc.secrets
			}
			sc.b.WriteByte(' ')
			sc.cut(s)
			return sc.b.String(), sc.secrets
		}
		if pairs > 0 {
			sc.b.WriteByte(' ')
		}
		pairs++
		sc.b.WriteString(key)
		sc.b.WriteByte('=')
		rest = trimSpace(rest[1:])

		var raw string
		if strings.HasPrefix(rest, "'") {
			j, closed := 1, false
			for j < len(rest) {
				if rest[j] == '\\' {
					j += 2
					continue
				}
				if rest[j] == '\'' {
					closed = true
					break
				}
				j++
			}
			if !closed {
				// An unterminated quote: where the value ends, and so
				// where a password might be, cannot be told.
				sc.cut(rest)
				sc.keep(unescapeKeywordValue(rest[1:]))
				return sc.b.String(), sc.secrets
			}
			raw, rest = rest[:j+1], rest[j+1:]
		} else {
			j := 0
			for j < len(rest) && !isSpace(rest[j]) {
				if rest[j] == '\\' {
					j++
				}
				j++
			}
			j = min(j, len(rest))
			raw, rest = rest[:j], rest[j:]
		}
		if IsSecretKey(key) || !printable(raw) {
			sc.hide(raw, unquoteKeywordValue(raw))
		} else {
			sc.b.WriteString(raw)
		}
		s = trimSpace(rest)
	}
	return sc.b.String(), sc.secrets
}

// unquoteKeywordValue returns the value a raw key/value value stands for.
func unquoteKeywordValue(raw string) string {
	if len(raw) >= 2 && raw[0] == '\'' && raw[len(raw)-1] == '\'' {
		raw = raw[1 : len(raw)-1]
	}
	return unescapeKeywordValue(raw)
}

// unescapeKeywordValue drops each backslash and keeps the byte after it.
func unescapeKeywordValue(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' {
			i++
			if i == len(s) {
				break
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// percentDecode decodes the valid %XX escapes of s and keeps the rest.
func percentDecode(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			hi, ok1 := unhex(s[i+1])
			lo, ok2 := unhex(s[i+2])
			if ok1 && ok2 {
				b.WriteByte(hi<<4 | lo)
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func unhex(c byte) (byte, bool) {
	switch {
	case isDigit(c):
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// safe reports whether s holds only ASCII letters, digits and the bytes in
// extra.
func safe(s, extra string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isAlpha(c) && !isDigit(c) && strings.IndexByte(extra, c) < 0 {
			return false
		}
	}
	return true
}

// printable reports whether s holds no control bytes.
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return false
		}
	}
	return true
}

func trimSpace(s string) string {
	for s != "" && isSpace(s[0]) {
		s = s[1:]
	}
	return s
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}
func isAlpha(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }
func isDigit(c byte) bool { return '0' <= c && c <= '9' }
