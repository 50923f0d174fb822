package natsjs

import (
	"fmt"
	"net/textproto"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/envelope"
)

// The headers the sink sets besides the message's own (see the package
// doc, "Mapping").
const (
	// HeaderMsgID is JetStream's deduplication header: the outbox id.
	HeaderMsgID = jetstream.MsgIDHeader
	// HeaderType carries the outbox type (format raw).
	HeaderType = "Walpost-Type"
	// HeaderKey carries the ordering key; absent when the key is NULL
	// (both formats).
	HeaderKey = "Walpost-Key"
	// HeaderContentType is the CloudEvents binding's datacontenttype
	// (format cloudevents), in lower case: NATS headers are case-sensitive,
	// and the CloudEvents SDK's NATS binding looks for "content-type".
	HeaderContentType = "content-type"
	// cePrefix starts the CloudEvents attribute headers (ce-id, …).
	cePrefix = "ce-"
)

// reservedHeader returns why a header of the headers column named k is
// left out because the sink sets or NATS reads a header of that name, or
// "": Nats-* (the server acts on Nats-Msg-Id, Nats-Expected-*,
// Nats-Rollup, Nats-TTL, …), Walpost-* (the sink's Walpost-Type and
// Walpost-Key, and the relay's own headers: publish.RowHeaderDenied),
// and with CloudEvents ce-* and content-type. The comparison ignores
// case, as receivers often do.
func reservedHeader(k string, ce bool) string {
	switch {
	case envelope.HasPrefixFold(k, "nats-"):
		return publish.BrokerRowHeader
	case ce && (envelope.HasPrefixFold(k, cePrefix) || strings.EqualFold(k, HeaderContentType)):
		return publish.OwnRowHeader
	}
	return ""
}

// headerKeyOK mirrors nats.go's rule for header names (printable ASCII
// other than `"()/,:;<=>?@[\]{}`), so that a bad name is refused with the
// message named instead of nats.go's bare ErrBadHeaderMsg.
func headerKeyOK(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c < 33 || c > 126 || strings.IndexByte(`"()/,:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// headerValueProblem returns why NATS would not carry v as it is, or "":
// nats.go trims white space around a header value and turns CR and LF
// into spaces, so that the receiver would get another value than the
// outbox holds.
func headerValueProblem(v string) string {
	switch {
	case strings.ContainsAny(v, "\r\n"):
		return "holds a line break, which NATS turns into a space"
	case textproto.TrimString(v) != v:
		return "starts or ends with white space, which NATS trims"
	}
	return ""
}

// natsMsg maps an outbox message to the NATS message published to
// subject: the payload as data, Nats-Msg-Id = id, the identity headers of
// the format, Walpost-Key when the key is not NULL, the headers column
// (reserved names left out), then the relay's own headers
// (message.RelayHeaders: a claim check's reference). Header names keep their case. A
// header name that NATS cannot carry, or a value it would change (see
// headerValueProblem), is an error naming the header.
func natsMsg(m *message.Message, subject string, env *envelope.Settings) (*nats.Msg, error) {
	h := make(nats.Header, len(m.Headers)+8)
	ce := env.IsCloudEvents()
	for k, v := range m.Headers {
		if !publish.KeepRowHeader(k) {
			continue
		}
		if why := reservedHeader(k, ce); why != "" {
			publish.LeaveOutRowHeader(k, why)
			continue
		}
		if !headerKeyOK(k) {
			return nil, fmt.Errorf("header %q of the headers column: NATS header names are printable ASCII without white space or any of \"()/,:;<=>?@[\\]{}", k)
		}
		if p := headerValueProblem(v); p != "" {
			return nil, fmt.Errorf("header %q of the headers column: its value %s; fix the value in the outbox row", k, p)
		}
		h[k] = []string{v}
	}
	for _, f := range []struct{ what, v string }{{"id", m.ID}, {"type", m.Type}, {"ordering key", m.Key}} {
		if p := headerValueProblem(f.v); p != "" {
			return nil, fmt.Errorf("the message's %s (sent as a header): its value %s; fix the value in the outbox row", f.what, p)
		}
	}
	h[HeaderMsgID] = []string{m.ID}
	if ce {
		for _, a := range env.Attributes(m) {
			h[cePrefix+a.Name] = []string{a.Value}
		}
		h[HeaderContentType] = []string{envelope.ContentType(m)}
	} else {
		h[HeaderType] = []string{m.Type}
	}
	if m.HasKey {
		h[HeaderKey] = []string{m.Key}
	}
	for _, rh := range m.RelayHeaders() {
		h[rh.Name] = []string{rh.Value}
	}
	data := m.Payload
	if data == nil {
		data = []byte{}
	}
	return &nats.Msg{Subject: subject, Header: h, Data: data}, nil
}
