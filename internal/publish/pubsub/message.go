package pubsub

import (
	"slices"
	"strings"

	gps "cloud.google.com/go/pubsub/v2"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/envelope"
)

// Attributes the sink sets (see the package doc).
const (
	AttrID   = "id"
	AttrType = "type"
	AttrKey  = "key"
	// PrefixCloudEvents starts the CloudEvents attributes with format:
	// cloudevents (the Google Cloud Pub/Sub protocol binding, binary
	// mode): ce-specversion, ce-id, ce-source, ce-type, ce-time, and
	// ce-partitionkey for a key; content-type is the datacontenttype.
	PrefixCloudEvents = "ce-"
	AttrContentType   = "content-type"
)

// Pub/Sub's limits on attributes.
const (
	maxAttributes   = 100
	maxAttrKeyLen   = 256
	maxAttrValueLen = 1024
)

// Reasons a headers column entry is not sent, as logged.
const (
	dropDenied  = "credentials, connection header or walpost-* (docs/security.md, \"Row headers\")"
	dropOwn     = "a name the sink sets itself"
	dropName    = "a name Pub/Sub refuses (over 256 bytes, or starting with goog)"
	dropValue   = "a value over Pub/Sub's 1024 bytes"
	dropTooMany = "over Pub/Sub's 100 attributes"
)

// toMessage maps m to a Pub/Sub message; drop is called for each headers
// column entry left out.
func toMessage(m *message.Message, env *envelope.Settings, drop func(name, why string)) *gps.Message {
	attrs := make(map[string]string, len(m.Headers)+8)
	ce := env != nil && env.IsCloudEvents()
	if ce {
		for _, a := range env.Attributes(m) {
			attrs[PrefixCloudEvents+a.Name] = a.Value
		}
		if m.HasKey {
			attrs[PrefixCloudEvents+"partitionkey"] = m.Key
		}
		attrs[AttrContentType] = envelope.ContentType(m)
	} else {
		attrs[AttrID], attrs[AttrType] = m.ID, m.Type
		if m.HasKey {
			attrs[AttrKey] = m.Key
		}
	}
	// The relay's own headers take their attributes before the headers
	// column's entries (which may not have their names).
	for _, h := range m.RelayHeaders() {
		attrs[h.Name] = h.Value
	}
	names := make([]string, 0, len(m.Headers))
	for k := range m.Headers {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		v := m.Headers[k]
		switch {
		case !publish.KeepRowHeader(k):
			drop(k, dropDenied)
		case ownName(k, ce):
			drop(k, dropOwn)
		case k == "" || len(k) > maxAttrKeyLen || envelope.HasPrefixFold(k, "goog"):
			drop(k, dropName)
		case len(v) > maxAttrValueLen:
			drop(k, dropValue)
		case len(attrs) >= maxAttributes:
			drop(k, dropTooMany)
		default:
			attrs[k] = v
		}
	}
	data := m.Payload
	if data == nil {
		data = []byte{}
	}
	return &gps.Message{Data: data, Attributes: attrs, OrderingKey: OrderingKey(m.OrderingKey())}
}

// ownName reports whether a headers column entry would pass for an
// attribute the sink sets, in any case.
func ownName(name string, ce bool) bool {
	for _, own := range []string{AttrID, AttrType, AttrKey, AttrContentType} {
		if strings.EqualFold(name, own) {
			return true
		}
	}
	return ce && envelope.HasPrefixFold(name, PrefixCloudEvents)
}
