package awsbatch

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/envelope"
)

// Names of the message attributes the sink sets (see the package doc).
const (
	AttrID   = "id"
	AttrType = "type"
	AttrKey  = "key"
	// AttrBodyEncoding is set to BodyBase64 when the body is the payload
	// in standard base64 (a payload that is not valid UTF-8 or holds
	// characters SQS refuses), and to BodyEmpty when the payload is empty
	// (SQS needs one character of body: the body is then "-").
	AttrBodyEncoding = "body-encoding"
	BodyBase64       = "base64"
	BodyEmpty        = "empty"
	// AttrContentType carries the datacontenttype with format: cloudevents.
	AttrContentType = "content-type"
	// PrefixCloudEvents starts the attributes of the CloudEvents context
	// with format: cloudevents (binary mode, as the HTTP and NATS
	// bindings spell them): ce-specversion, ce-id, ce-source, ce-type,
	// ce-time, and ce-partitionkey for a key.
	PrefixCloudEvents = "ce-"
	// HeaderTraceparent and HeaderTracestate are the headers column
	// entries that go first when the attributes run short.
	HeaderTraceparent = "traceparent"
	HeaderTracestate  = "tracestate"
)

// MaxAttributes is how many message attributes SQS takes per message.
const MaxAttributes = 10

// maxAttrNameLen is the longest attribute name SQS takes.
const maxAttrNameLen = 256

// StringType is the DataType of every attribute the sinks set.
const StringType = "String"

// Reasons a headers column entry is not sent, as logged.
const (
	dropDenied   = "credentials, connection header or walpost-* (docs/security.md, \"Row headers\")"
	dropOwn      = "a name the sink sets itself"
	dropName     = "not a legal SQS attribute name (1-256 of a-z A-Z 0-9 _ - ., no leading, trailing or double '.', no AWS. or Amazon. prefix)"
	dropValue    = "empty, or holds characters SQS refuses"
	dropTooMany  = "over SQS's 10 message attributes"
	emptyBodyStr = "-"
)

// Encode returns m's body and String message attributes as the sqs and
// sns sinks send them (docs/sinks/sqs.md, "Mapping"), and its size as SQS
// and SNS count it: body, attribute names, types and values. drop is
// called for each headers column entry left out, with the reason.
func Encode(m *message.Message, env *envelope.Settings, drop func(name, why string)) (body string, attrs map[string]string, size int) {
	attrs = make(map[string]string, MaxAttributes)
	set := func(name, value string) {
		attrs[name] = value
		size += len(name) + len(StringType) + len(value)
	}
	switch {
	case len(m.Payload) == 0:
		body = emptyBodyStr
		set(AttrBodyEncoding, BodyEmpty)
	case ValidBody(m.Payload):
		body = string(m.Payload)
	default:
		body = base64.StdEncoding.EncodeToString(m.Payload)
		set(AttrBodyEncoding, BodyBase64)
	}
	size += len(body)
	ce := env != nil && env.IsCloudEvents()
	if ce {
		for _, a := range env.Attributes(m) {
			if a.Value != "" {
				set(PrefixCloudEvents+a.Name, a.Value)
			}
		}
		if m.HasKey && m.Key != "" {
			set(PrefixCloudEvents+"partitionkey", m.Key)
		}
		set(AttrContentType, envelope.ContentType(m))
	} else {
		set(AttrID, m.ID)
		set(AttrType, m.Type)
		if m.HasKey && m.Key != "" {
			set(AttrKey, m.Key)
		}
	}
	// The relay's own headers take their attributes before the headers
	// column's entries (which may not have their names): the receiver
	// needs a claim check's reference to have a payload at all.
	for _, h := range m.RelayHeaders() {
		set(h.Name, h.Value)
	}
	for _, name := range headerOrder(m.Headers) {
		v := m.Headers[name]
		switch {
		case !publish.KeepRowHeader(name):
			drop(name, dropDenied)
		case ownName(name, ce):
			drop(name, dropOwn)
		case !legalAttrName(name):
			drop(name, dropName)
		case v == "" || !ValidBody([]byte(v)):
			drop(name, dropValue)
		case len(attrs) >= MaxAttributes:
			drop(name, dropTooMany)
		default:
			set(name, v)
		}
	}
	return body, attrs, size
}

// headerOrder returns the names of the headers column entries in the order
// they take the free attributes: traceparent, tracestate, then by name.
func headerOrder(h map[string]string) []string {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	rank := func(s string) int {
		switch s {
		case HeaderTraceparent:
			return 0
		case HeaderTracestate:
			return 1
		}
		return 2
	}
	slices.SortFunc(names, func(a, b string) int {
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra - rb
		}
		return strings.Compare(a, b)
	})
	return names
}

// ownName reports whether a headers column entry would pass for an
// attribute the sink sets, in any case.
func ownName(name string, ce bool) bool {
	for _, own := range []string{AttrID, AttrType, AttrKey, AttrBodyEncoding, AttrContentType} {
		if strings.EqualFold(name, own) {
			return true
		}
	}
	return ce && envelope.HasPrefixFold(name, PrefixCloudEvents)
}

// legalAttrName reports whether SQS takes name as a message attribute
// name.
func legalAttrName(name string) bool {
	if name == "" || len(name) > maxAttrNameLen || name[0] == '.' || name[len(name)-1] == '.' ||
		strings.Contains(name, "..") || envelope.HasPrefixFold(name, "aws.") || envelope.HasPrefixFold(name, "amazon.") {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// ValidBody reports whether SQS (and SNS) take b as a message body or string
// value: valid UTF-8 of the characters #x9, #xA, #xD, #x20 to #xD7FF,
// #xE000 to #xFFFD and #x10000 to #x10FFFF.
func ValidBody(b []byte) bool {
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r == utf8.RuneError && n <= 1 {
			return false
		}
		if !(r == 0x9 || r == 0xA || r == 0xD || r >= 0x20 && r <= 0xD7FF || r >= 0xE000 && r <= 0xFFFD || r >= 0x10000 && r <= 0x10FFFF) {
			return false
		}
		b = b[n:]
	}
	return true
}

// maxGroupIDLen is the longest MessageGroupId SQS accepts.
const maxGroupIDLen = 128

// groupIDPrefix starts a MessageGroupId that stands for a key SQS would
// not take as one.
const groupIDPrefix = "sha256:"

// GroupID returns the MessageGroupId of a message of ordering key key:
// the key itself when SQS takes it (1 to 128 characters of a-z, A-Z,
// 0-9 and ASCII punctuation), else "sha256:" and the hex SHA-256 of the
// key, so that one key is always one group. The key itself travels in
// the key attribute.
func GroupID(key string) string {
	if key != "" && len(key) <= maxGroupIDLen && !strings.HasPrefix(key, groupIDPrefix) {
		ok := true
		for i := 0; i < len(key); i++ {
			if c := key[i]; c <= ' ' || c > '~' {
				ok = false
				break
			}
		}
		if ok {
			return key
		}
	}
	sum := sha256.Sum256([]byte(key))
	return groupIDPrefix + hex.EncodeToString(sum[:])
}

// DecodeBody returns the outbox payload of a received body whose
// body-encoding attribute is enc ("" when absent): the body, its base64
// decoded, or empty.
func DecodeBody(body, enc string) ([]byte, error) {
	switch enc {
	case BodyBase64:
		return base64.StdEncoding.DecodeString(body)
	case BodyEmpty:
		return []byte{}, nil
	}
	return []byte(body), nil
}
