package decoder

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"unicode/utf8"

	"github.com/jackc/pglogrepl"
)

// ErrProtocol is wrapped by errors for bytes that are not valid pgoutput.
var ErrProtocol = errors.New("decoder: malformed pgoutput message")

// Error is a row the decoder cannot map to a message: bad input, not a
// protocol failure. It names the row's position and, when it could be read,
// its id.
//
// Nothing in an Error is altered to make it printable: Error() and ID are
// valid UTF-8 (a value that is not is quoted with Go escapes, \xff, in
// the text, and an id that is not valid UTF-8 is not an ID), and Row keeps
// the values' bytes exactly as sent; its JSON encoding (RowValues.MarshalJSON,
// which encoding/json uses) writes a value that is not valid UTF-8 as
// {"base64": "..."} instead of letting encoding/json replace its bytes
// with U+FFFD.
type Error struct {
	LSN       pglogrepl.LSN
	CommitLSN pglogrepl.LSN
	Seq       uint32 // the row's ordinal at LSN (message.Message.Seq)
	ID        string // "" when the id itself could not be read
	// Key is the row's ordering key (message.Message.OrderingKey: the key
	// column, or the id when the key is NULL or not mapped) when KeyKnown;
	// relay.on_invalid: hold_key holds it.
	Key      string
	KeyKnown bool
	Err      error
	// Row holds the mapped columns' values as sent (text format), by
	// column name; NULL columns are absent. It lets a dead-letter policy
	// park the row for repair: marshal it with encoding/json.
	Row RowValues
	// Table is set when the table's columns do not fit the mapping (a
	// mapped column missing or of an unusable type): every row of the
	// table fails alike until the config or the table is fixed, so such
	// an error is not one to park rows for.
	Table bool
	// Forged is set for a message that claims to be an outbox message but
	// was not written by whom the relay trusts: an envelope without a
	// valid signature under postgres.message_keys, or an adopt message of
	// a transaction no cdc init --adopt or cdc recover recorded. It is
	// never published, and relay.on_invalid does not apply: no role may
	// stop the relay with it (docs/security.md).
	Forged bool
}

func (e *Error) Error() string {
	at := e.LSN.String()
	if e.Seq > 0 {
		at = fmt.Sprintf("%s (row %d of a multi-row insert)", at, e.Seq+1)
	}
	if e.ID != "" {
		return fmt.Sprintf("outbox message %s at LSN %s: %v", e.ID, at, e.Err)
	}
	return fmt.Sprintf("outbox row at LSN %s: %v", at, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// RowValues is an outbox row's mapped columns, by column name: each value as
// the server sent it, in text format, byte for byte. Values need not be
// valid UTF-8 (a SQL_ASCII database stores any bytes in text).
type RowValues map[string]string

// MarshalJSON encodes the row as a JSON object with sorted keys. A value
// that is valid UTF-8 is a JSON string; a value that is not is an object
// {"base64": "<the bytes in standard base64>"}, so the encoding is
// lossless and a reader tells the two apart by the JSON type. Keys are the
// mapping's column names (from the config, valid UTF-8); a key that is not
// valid UTF-8 is an error rather than a silently altered name.
func (r RowValues) MarshalJSON() ([]byte, error) {
	if r == nil {
		return []byte("null"), nil
	}
	b := []byte{'{'}
	for i, k := range slices.Sorted(maps.Keys(r)) {
		if !utf8.ValidString(k) {
			return nil, fmt.Errorf("decoder: row column name %q is not valid UTF-8", k)
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, k)
		b = append(b, ':')
		if v := r[k]; utf8.ValidString(v) {
			b = appendJSONString(b, v)
		} else {
			b = append(b, `{"base64":"`...)
			b = base64.StdEncoding.AppendEncode(b, []byte(v))
			b = append(b, `"}`...)
		}
	}
	return append(b, '}'), nil
}

// appendJSONString appends s, valid UTF-8, as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always marshals
	return append(b, q...)
}
