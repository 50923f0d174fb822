package decoder

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/internal/envsig"
	"github.com/walpost/walpost/internal/message"
)

// EnvelopeVersion is the version of the envelope this decoder reads (the
// envelope's optional "v").
const EnvelopeVersion = 1

// envelopeFields are the envelope's fields, in the order errors name them.
var envelopeFields = []string{"v", "id", "type", "key", "headers", "payload", "payload_base64", "deliver_at", "expires_at"}

// ForgedText is in the error of every envelope parked because no key of
// postgres.message_keys signed it: resend refuses such a row while the
// configuration has no key to check it with.
const ForgedText = "postgres.message_keys is set: only a producer holding a key publishes"

// AcceptMessages makes the decoder read the table-less outbox
// (postgres.source: messages): every transactional logical message with
// exactly this prefix, inside its transaction, is an outbox message whose
// content is an envelope (see DecodeEnvelope), and table rows are ignored
// entirely (Inserts are skipped, adopt messages are not read). A
// non-transactional message with the prefix is an invalid row: it was
// written whether or not the application's transaction committed, so it is
// not an outbox message. prefix must not be "".
func (d *Decoder) AcceptMessages(prefix string) { d.envelope = prefix }

// RequireSignature makes the table-less outbox's decoder accept only
// envelopes signed with one of keys (postgres.message_keys; package
// envsig): any other message with the prefix, transactional or not, is
// an *Error with Forged set, whatever else is wrong with it.
func (d *Decoder) RequireSignature(keys [][]byte) { d.keys = keys }

// enveloped decodes a logical message with the table-less outbox's prefix
// into a Row, or an *Error for a bad envelope or a non-transactional
// message (bad input: relay.on_invalid and cdc skip apply).
func (d *Decoder) enveloped(m *pglogrepl.LogicalDecodingMessage) (Event, error) {
	if m.Transactional && !d.tx.open {
		return Event{}, fmt.Errorf("%w: transactional logical message at %s outside a transaction", ErrProtocol, m.LSN)
	}
	content := m.Content
	if d.keys != nil {
		body, err := envsig.Verify(d.keys, m.Prefix, content)
		if err != nil {
			e := &Error{LSN: m.LSN, Forged: true, Row: RowValues{"envelope": string(m.Content)},
				Err: fmt.Errorf("logical message with prefix %q: %w (%s; outbox.SigningKey)", m.Prefix, err, ForgedText)}
			if d.tx.open {
				e.CommitLSN = d.tx.commitLSN
			}
			if msg, _ := DecodeEnvelope(content); msg != nil {
				e.ID = msg.ID
			}
			return Event{}, e
		}
		content = body
	}
	msg, err := DecodeEnvelope(content)
	invalid := func(err error) (Event, error) {
		e := &Error{LSN: m.LSN, Err: fmt.Errorf("logical message with prefix %q: %w", m.Prefix, err),
			Row: RowValues{"envelope": string(m.Content)}}
		if d.tx.open {
			e.CommitLSN = d.tx.commitLSN
		}
		if msg != nil {
			e.ID = msg.ID
		}
		return Event{}, e
	}
	if !m.Transactional {
		return invalid(errors.New("it is non-transactional (pg_logical_emit_message(false, …)): it is written even when the transaction that wrote it rolls back, " +
			"so walpost does not relay it; emit outbox messages with pg_logical_emit_message(true, …) (outbox.Emit)"))
	}
	if err != nil {
		return invalid(err)
	}
	msg.LSN, msg.CommitLSN, msg.CommitTime = m.LSN, d.tx.commitLSN, d.tx.commitTime
	return Event{Kind: Row, Msg: msg, LSN: m.LSN, CommitLSN: d.tx.commitLSN}, nil
}

// DecodeEnvelope reads a table-less outbox message's content: one JSON
// object, valid UTF-8, with the fields
//
//	v               optional; 1 (the only version so far)
//	id              required; a UUID in canonical text form (36 characters)
//	type            required; a non-empty string
//	key             optional; a string, or null for none
//	headers         optional; an object whose values are strings, or null
//	payload         any JSON value, published byte for byte as written
//	payload_base64  instead of payload: bytes in standard base64 (RFC 4648,
//	                padded), published as they are (JSON only when they are
//	                JSON text, as a bytea payload)
//	deliver_at      optional; an RFC 3339 time string, or null: not to be
//	                delivered before (as columns.deliver_at)
//	expires_at      optional; an RFC 3339 time string, or null: expires
//	                then (as columns.expires_at)
//
// Exactly one of payload and payload_base64; no other field, and no field
// twice. A \u escape that stands for no character (an unpaired UTF-16
// surrogate) is refused in id, type, key and headers, where decoding would
// replace it. It returns the message without positions; on error the
// message, when not nil, holds the id as far as it could be read (for the
// error's ID).
func DecodeEnvelope(content []byte) (*message.Message, error) {
	content, _ = envsig.Split(content) // checked, when required, by the decoder
	if !utf8.Valid(content) {
		off := 0
		for off < len(content) {
			r, size := utf8.DecodeRune(content[off:])
			if r == utf8.RuneError && size <= 1 {
				break
			}
			off += size
		}
		return nil, fmt.Errorf("the envelope is not valid UTF-8 (byte 0x%02x at offset %d); fix the producer", content[off], off)
	}
	fields, err := envelopeObject(content)
	m := &message.Message{}
	if raw, ok := fields["id"]; ok {
		var id string
		if json.Unmarshal(raw, &id) == nil && checkSurrogates(raw) == nil {
			m.ID = id
		}
	}
	if err == nil {
		err = fillEnvelope(m, fields)
	}
	if err != nil {
		if m.ID == "" {
			return nil, err
		}
		return &message.Message{ID: m.ID}, err
	}
	return m, nil
}

// envelopeObject splits the envelope into its fields' JSON texts, refusing
// anything but one object of known, distinct fields. With an unknown or
// repeated field it returns the fields as well (the first of a repeated
// one), so that the error can name the id.
func envelopeObject(content []byte) (map[string]json.RawMessage, error) {
	if !json.Valid(content) || len(bytes.TrimLeft(content, " \t\r\n")) == 0 || bytes.TrimLeft(content, " \t\r\n")[0] != '{' {
		return nil, fmt.Errorf("the envelope is not a JSON object (%s); see the envelope contract in docs/design.md", excerpt(content))
	}
	dec := json.NewDecoder(bytes.NewReader(content))
	dec.Token() // '{'
	fields := map[string]json.RawMessage{}
	var bad error
	for dec.More() {
		tok, _ := dec.Token()
		key := tok.(string) // valid JSON: an object's key
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("the envelope's %q: %v", key, err)
		}
		_, dup := fields[key]
		switch {
		case bad != nil:
		case !slices.Contains(envelopeFields, key):
			bad = fmt.Errorf("the envelope has an unknown field %q (its fields are %s)", key, strings.Join(envelopeFields, ", "))
		case dup:
			bad = fmt.Errorf("the envelope has the field %q twice", key)
		}
		if !dup {
			fields[key] = raw
		}
	}
	return fields, bad
}

// fillEnvelope checks the envelope's fields and sets m's from them; m.ID
// is set already when the id is a string.
func fillEnvelope(m *message.Message, f map[string]json.RawMessage) error {
	if raw, ok := f["v"]; ok && string(raw) != "1" {
		return fmt.Errorf("the envelope's version v is %s; this walpost reads version %d", excerpt(raw), EnvelopeVersion)
	}
	str := func(name string) (string, bool, error) {
		raw, ok := f[name]
		if !ok || string(raw) == "null" {
			return "", false, nil
		}
		var v string
		if err := json.Unmarshal(raw, &v); err != nil {
			return "", false, fmt.Errorf("%s is %s, not a string", name, excerpt(raw))
		}
		if err := checkSurrogates(raw); err != nil {
			return "", false, fmt.Errorf("%s: %v", name, err)
		}
		return v, true, nil
	}
	id, _, err := str("id")
	switch {
	case err != nil:
		return err
	case id == "":
		return errors.New("id is missing or empty")
	case len(id) != 36 || uuid.Validate(id) != nil:
		return fmt.Errorf("id %q is not a UUID (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)", id)
	}
	typ, _, err := str("type")
	if err != nil {
		return err
	}
	if typ == "" {
		return errors.New("type is missing or empty")
	}
	m.Type = typ
	if m.Key, m.HasKey, err = str("key"); err != nil {
		return err
	}
	if raw, ok := f["headers"]; ok && string(raw) != "null" {
		h, err := envelopeHeaders(raw)
		if err != nil {
			return err
		}
		m.Headers = h
	}
	for _, t := range []struct {
		name string
		to   *time.Time
	}{{"deliver_at", &m.DeliverAt}, {"expires_at", &m.ExpiresAt}} {
		v, ok, err := str(t.name)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if *t.to, err = time.Parse(time.RFC3339Nano, v); err != nil {
			return fmt.Errorf("%s %q is not an RFC 3339 time (2026-12-06T07:05:00Z)", t.name, v)
		}
	}
	return envelopePayload(m, f)
}

// envelopeHeaders reads the headers: a JSON object of strings.
func envelopeHeaders(raw json.RawMessage) (map[string]string, error) {
	var h map[string]string
	if err := json.Unmarshal(raw, &h); err != nil || h == nil {
		return nil, fmt.Errorf("headers is not a JSON object of strings (%s)", excerpt(raw))
	}
	if err := checkSurrogates(raw); err != nil {
		return nil, fmt.Errorf("headers: %v", err)
	}
	return h, nil
}

// envelopePayload sets m's payload from payload or payload_base64.
func envelopePayload(m *message.Message, f map[string]json.RawMessage) error {
	raw, isJSON := f["payload"]
	b64, isBytes := f["payload_base64"]
	switch {
	case isJSON && isBytes:
		return errors.New("the envelope has both payload and payload_base64; it takes one")
	case isJSON:
		m.Payload, m.PayloadJSON = clone(raw), true
		return nil
	case !isBytes:
		return errors.New("payload is missing (payload: any JSON value, or payload_base64: bytes in base64)")
	}
	var s string
	if err := json.Unmarshal(b64, &s); err != nil {
		return fmt.Errorf("payload_base64 is %s, not a string", excerpt(b64))
	}
	b, err := base64.StdEncoding.Strict().DecodeString(s)
	if err != nil {
		return fmt.Errorf("payload_base64 is not standard base64: %v", err)
	}
	m.Payload, m.PayloadJSON = b, utf8.Valid(b) && json.Valid(b)
	return nil
}
