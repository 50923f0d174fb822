package publish

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"slices"
	"unicode/utf8"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish/envelope"
)

// The CloudEvents extension attributes of the file and stdout sinks'
// lines with format: cloudevents (docs/design.md, "Formats").
const (
	// ExtLSN is the LSN of the message's INSERT.
	ExtLSN = "walpostlsn"
	// ExtCommitLSN is the LSN of its transaction's commit record.
	ExtCommitLSN = "walpostcommitlsn"
	// ExtPartitionKey is the outbox key (CloudEvents Partitioning
	// extension), left out when the key is NULL.
	ExtPartitionKey = "partitionkey"
	// ExtHeaders holds the headers column as the text of a JSON object
	// with sorted keys (an extension's value is a string, not a map),
	// left out when the column is NULL or empty.
	ExtHeaders = "walpostheaders"
)

// traceExtensions are the headers column entries also written as
// extensions of the same name: the CloudEvents Distributed Tracing
// extension.
var traceExtensions = []string{"traceparent", "tracestate"}

// CloudEventLineStart is how every line of AppendCloudEventLine begins.
var CloudEventLineStart = `{"specversion":"` + envelope.SpecVersion + `","id":"`

// AppendCloudEventLine appends m as one line in format: cloudevents, a
// CloudEvents 1.0 event in the JSON event format (structured content
// mode), newline included:
//
//	{"specversion":"1.0","id":"…","source":"walpost","type":"…","time":"2026-12-03T09:05:49.123456Z",
//	 "datacontenttype":"application/json","partitionkey":"…","walpostlsn":"0/16B3748",
//	 "walpostcommitlsn":"0/16B37A0","traceparent":"…","walpostheaders":"{…}","data":<the JSON payload>}
//
// (one line). time is left out when the commit time is unknown,
// partitionkey when the key is NULL, traceparent and tracestate when the
// headers column has no such entry, walpostheaders when it has none. A
// payload that AppendJSONLine would write in base64 goes into data_base64
// instead of data, with datacontenttype application/octet-stream (or
// application/json for JSON bytes that are not UTF-8); an empty payload
// has neither. A multi-line JSON payload is compacted, as AppendJSONLine
// does.
func AppendCloudEventLine(b []byte, m *message.Message, env *envelope.Settings) []byte {
	b = append(b, '{')
	for i, a := range env.Attributes(m) {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, a.Name)
		b = append(b, ':')
		b = appendString(b, a.Value)
	}
	b = appendField(b, "datacontenttype", envelope.ContentType(m))
	if m.HasKey {
		b = appendField(b, ExtPartitionKey, m.Key)
	}
	b = appendField(b, ExtLSN, m.LSN.String())
	b = appendField(b, ExtCommitLSN, m.CommitLSN.String())
	for _, k := range traceExtensions {
		if v, ok := m.Headers[k]; ok {
			b = appendField(b, k, v)
		}
	}
	if h := DataHeaders(m); len(h) > 0 {
		b = appendField(b, ExtHeaders, string(appendHeadersObject(nil, h)))
	}
	switch {
	case len(m.Payload) == 0:
	case !m.PayloadJSON || !utf8.Valid(m.Payload):
		b = append(b, `,"data_base64":"`...)
		b = base64.StdEncoding.AppendEncode(b, m.Payload)
		b = append(b, '"')
	default:
		b = append(b, `,"data":`...)
		b = appendJSONPayload(b, m.Payload)
	}
	return append(b, "}\n"...)
}

// appendField appends ,"name":"value".
func appendField(b []byte, name, value string) []byte {
	b = append(b, ',')
	b = appendString(b, name)
	b = append(b, ':')
	return appendString(b, value)
}

// appendHeadersObject appends headers as a JSON object with sorted keys.
func appendHeadersObject(b []byte, headers map[string]string) []byte {
	b = append(b, '{')
	keys := make([]string, 0, len(headers))
	for k := range headers {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, k)
		b = append(b, ':')
		b = appendString(b, headers[k])
	}
	return append(b, '}')
}

// appendJSONPayload appends a JSON payload, compacted when it spans lines
// so that the message stays one line.
func appendJSONPayload(b, payload []byte) []byte {
	if bytes.ContainsAny(payload, "\r\n") {
		var buf bytes.Buffer
		if json.Compact(&buf, payload) == nil {
			return append(b, buf.Bytes()...)
		}
	}
	return append(b, payload...)
}
