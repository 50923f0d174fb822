package redact

import "strings"

// secretFragments announce a secret anywhere in a name, once its words are
// joined and lower-cased (shared_access_key → sharedaccesskey).
var secretFragments = []string{
	"password", "passwd", "passphrase", "secret", "token", "credential",
	"apikey", "accesskey", "privatekey", "connectionstring", "connstring",
	"sharedaccess", "bearer", "saskey", "authorization",
}

// secretWords announce a secret as a whole word of a name.
var secretWords = map[string]bool{"pass": true, "pwd": true, "pw": true, "sas": true, "jwt": true, "dsn": true, "nkey": true, "seed": true}

// keyPrefixes make a name ending in "key" a secret (api_key, signing_key);
// other keys (partition_key, routing_key) are not.
var keyPrefixes = map[string]bool{
	"api": true, "access": true, "secret": true, "private": true, "signing": true, "encryption": true,
	"hmac": true, "sas": true, "shared": true, "master": true, "client": true, "account": true,
	"auth": true, "license": true, "storage": true, "primary": true, "secondary": true,
}

// notSecretLast are last words that make a name about a secret without
// holding one: password_file is a path, shared_access_key_name a name.
var notSecretLast = map[string]bool{
	"file": true, "files": true, "path": true, "dir": true, "name": true, "names": true, "env": true,
	"mode": true, "type": true, "mechanism": true, "url": true, "uri": true, "endpoint": true,
	"expiry": true, "ttl": true, "length": true, "len": true, "count": true, "command": true,
	"cmd": true, "id": true, "user": true, "username": true, "enabled": true,
}

// IsSecretKey reports whether a setting named key holds a secret: a
// password, key, token, signature or connection string. It is generous
// (passwd, sasl.password, SharedAccessKey, api_key, client_secret, nkey,
// bearer_token, connection_string all are), matches without regard to case
// or to the separators between words (_, -, ., camelCase), and excludes
// names that only point at a secret: key_file, password_file, cert_path,
// shared_access_key_name, token_url.
func IsSecretKey(key string) bool {
	words := splitWords(key)
	if len(words) == 0 || notSecretLast[words[len(words)-1]] {
		return false
	}
	joined := strings.Join(words, "")
	for _, f := range secretFragments {
		if strings.Contains(joined, f) {
			return true
		}
	}
	for i, w := range words {
		if secretWords[w] {
			return true
		}
		if w == "key" && i > 0 && keyPrefixes[words[i-1]] {
			return true
		}
	}
	return false
}

// splitWords splits a name into lower-case words at every byte that is not
// a letter or digit and where a lower-case letter or digit meets an
// upper-case one.
func splitWords(s string) []string {
	var words []string
	var w []byte
	flush := func() {
		if len(w) > 0 {
			words = append(words, string(w))
			w = w[:0]
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'A' <= c && c <= 'Z':
			if i > 0 && ('a' <= s[i-1] && s[i-1] <= 'z' || isDigit(s[i-1])) {
				flush()
			}
			w = append(w, c+'a'-'A')
		case 'a' <= c && c <= 'z' || isDigit(c):
			w = append(w, c)
		default:
			flush()
		}
	}
	flush()
	return words
}
