package redact

import (
	"regexp"
	"strings"
)

// connStringKeys are the keys of an Azure Service Bus connection string,
// lower-cased, and whether their value is secret.
var connStringKeys = map[string]bool{
	"endpoint":               false,
	"sharedaccesskeyname":    false,
	"sharedaccesskey":        true,
	"sharedaccesssignature":  true,
	"entitypath":             false,
	"usedevelopmentemulator": false,
}

var endpointHostRE = regexp.MustCompile(`(?i)endpoint\s*=\s*sb://([a-z0-9.-]+(?::[0-9]+)?)`)

// ConnectionString returns s, an Azure Service Bus connection string
// ("Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=send;
// SharedAccessKey=…", or with SharedAccessSignature=…), with the values
// of SharedAccessKey and SharedAccessSignature replaced by Mask. Keys are
// matched without regard to case or surrounding spaces. A string that is
// not exactly key=value pairs of known keys separated by ';' (commas
// instead of semicolons, a missing '=', a misspelt key, a value with a
// space or '=' where none belongs) may hide its key anywhere, so it is
// reduced to "Endpoint=sb://HOST/;…" when an endpoint host can be found and
// to "<unparseable connection string>" when not.
func ConnectionString(s string) string {
	parts := strings.Split(s, ";")
	ok := true
	for i, part := range parts {
		if strings.TrimSpace(part) == "" {
			continue
		}
		k, v, found := strings.Cut(part, "=")
		secret, known := connStringKeys[asciiLower(strings.TrimSpace(k))]
		switch {
		case !found || !known:
			ok = false
		case secret:
			parts[i] = k + "=" + Mask
		case strings.ContainsAny(strings.TrimSpace(v), "=, \t\r\n"):
			ok = false
		}
	}
	if ok {
		return strings.Join(parts, ";")
	}
	if m := endpointHostRE.FindStringSubmatch(s); m != nil {
		return "Endpoint=sb://" + m[1] + "/;" + cut
	}
	return unparseableKV
}

// ConnectionStringSecrets returns what ConnectionString may hide in s: s
// itself, and the text after each SharedAccessKey or SharedAccessSignature
// up to the next ';' (and up to the next ',', for strings written with
// commas), found even when the '=' after the key is missing.
func ConnectionStringSecrets(s string) []string {
	var out []string
	add := func(v string) {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	add(s)
	lower := asciiLower(s)
	for _, name := range []string{"sharedaccesskey", "sharedaccesssignature"} {
		for i := 0; ; {
			j := strings.Index(lower[i:], name)
			if j < 0 {
				break
			}
			start := i + j + len(name)
			i = start
			if name == "sharedaccesskey" && (strings.HasPrefix(lower[start:], "name") || strings.HasPrefix(lower[start:], "signature")) {
				continue
			}
			v := strings.TrimLeft(s[start:], " \t=:")
			if k := strings.IndexByte(v, ';'); k >= 0 {
				v = v[:k]
			}
			add(v)
			if k := strings.IndexByte(v, ','); k >= 0 {
				add(v[:k])
			}
		}
	}
	return out
}

// asciiLower lower-cases the ASCII letters of s and keeps every other byte,
// so that byte offsets in the result are offsets in s.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
