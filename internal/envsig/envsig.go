// Package envsig signs and verifies the envelopes of a table-less outbox
// (postgres.source: messages), so that a relay with postgres.message_keys
// publishes only messages written by a producer that holds a key, not
// every role that may call pg_logical_emit_message (docs/security.md,
// "Table-less outbox: who may write a message").
//
// A signed envelope is the envelope with a first field "sig":
//
//	{"sig":"v1.<64 hex digits>","v":1,"id":…}
//
// The digits are HMAC-SHA256(key, "walpost envelope v1\n" + prefix + "\n"
// + body), where body is the envelope without the sig field: "{" and
// everything after `"sig":"…",`. The prefix is the logical message's, so
// a signed message cannot be moved to another outbox's prefix. A copy of
// a signed message emitted again is valid: it carries the same id, and
// inboxes drop it.
//
// The package is pure and safe for concurrent use.
package envsig

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
)

// Version is the scheme's name in the sig field.
const Version = "v1"

const (
	head   = `{"sig":"` + Version + "."
	macLen = sha256.Size * 2 // hex digits
)

// Errors of Verify.
var (
	ErrUnsigned = errors.New("envsig: the envelope carries no signature")
	ErrBad      = errors.New("envsig: the envelope's signature does not match any key")
)

// Sign returns body, an envelope (a JSON object, starting with "{"),
// signed with key for prefix.
func Sign(key []byte, prefix string, body []byte) []byte {
	out := make([]byte, 0, len(head)+macLen+2+len(body))
	out = append(out, head...)
	out = hex.AppendEncode(out, mac(key, prefix, body))
	out = append(out, `",`...)
	return append(out, body[1:]...)
}

// Split returns the envelope without its sig field, and the signature's
// bytes; sig is nil when content has no sig field in the form Sign
// writes (content is then returned as it is).
func Split(content []byte) (body, sig []byte) {
	if len(content) < len(head)+macLen+2 || !bytes.HasPrefix(content, []byte(head)) || string(content[len(head)+macLen:len(head)+macLen+2]) != `",` {
		return content, nil
	}
	sig, err := hex.DecodeString(string(content[len(head) : len(head)+macLen]))
	if err != nil {
		return content, nil
	}
	body = make([]byte, 0, len(content)-len(head)-macLen-1)
	body = append(body, '{')
	return append(body, content[len(head)+macLen+2:]...), sig
}

// Keys returns keys (postgres.message_keys) as Verify takes them; nil
// for none.
func Keys(keys []string) [][]byte {
	if len(keys) == 0 {
		return nil
	}
	out := make([][]byte, len(keys))
	for i, k := range keys {
		out[i] = []byte(k)
	}
	return out
}

// Verify returns the envelope without its signature when one of keys
// signed content for prefix; ErrUnsigned when it carries no signature,
// ErrBad when none of keys made it.
func Verify(keys [][]byte, prefix string, content []byte) ([]byte, error) {
	body, sig := Split(content)
	if sig == nil {
		return nil, ErrUnsigned
	}
	for _, k := range keys {
		if hmac.Equal(sig, mac(k, prefix, body)) {
			return body, nil
		}
	}
	return nil, ErrBad
}

func mac(key []byte, prefix string, body []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte("walpost envelope " + Version + "\n"))
	h.Write([]byte(prefix))
	h.Write([]byte("\n"))
	h.Write(body)
	return h.Sum(nil)
}
