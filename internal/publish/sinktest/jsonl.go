package sinktest

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/internal/message"
)

// Line is one line of the file and stdout sinks, as written
// (docs/design.md, "Contracts"):
// {"id":…,"type":…,"key":…,"payload":<JSON>,"headers":{…},"lsn":"0/16B3748","commit_lsn":"0/16B37A0"}
type Line struct {
	ID        string            `json:"id"`
	Type      string            `json:"type"`
	Key       *string           `json:"key"`
	Payload   json.RawMessage   `json:"payload"`
	Headers   map[string]string `json:"headers"`
	LSN       string            `json:"lsn"`
	CommitLSN string            `json:"commit_lsn"`
	// PayloadEncoding is "base64" when the payload is not JSON (a bytea
	// column holding other bytes) and was written as a base64 string.
	PayloadEncoding string `json:"payload_encoding,omitempty"`
}

// ReadJSONLines parses the JSON lines that the file and stdout sinks write,
// one message per line, in order. A key that is null or absent gives
// HasKey false; the payload is the field's raw JSON text (PayloadJSON
// true), or, with "payload_encoding":"base64", the decoded bytes
// (PayloadJSON false); lsn and commit_lsn are parsed when present. Blank lines are
// skipped; any other line that does not parse is an error naming its line
// number, so a torn last line is reported, not ignored.
//
// Use it in a harness's Read, e.g. on os.Open of the sink's file.
func ReadJSONLines(r io.Reader) ([]*message.Message, error) {
	lines, err := ReadLines(r)
	msgs := make([]*message.Message, 0, len(lines))
	for i, l := range lines {
		m, perr := l.Message()
		if perr != nil {
			return msgs, fmt.Errorf("sinktest: line %d: %w", i+1, perr)
		}
		msgs = append(msgs, m)
	}
	return msgs, err
}

// ReadLines parses the JSON lines that the file and stdout sinks write, as
// written. Blank lines are skipped; a line that does not parse (a torn
// line) or has no id is an error naming its line number.
func ReadLines(r io.Reader) ([]Line, error) {
	br := bufio.NewReaderSize(r, 1<<20)
	var lines []Line
	for n := 1; ; n++ {
		raw, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(raw)) > 0 {
			var l Line
			if perr := json.Unmarshal(raw, &l); perr != nil {
				return lines, fmt.Errorf("sinktest: line %d is not JSON (%v): %.200s", n, perr, raw)
			}
			if l.ID == "" {
				return lines, fmt.Errorf(`sinktest: line %d: no "id"`, n)
			}
			lines = append(lines, l)
		}
		if errors.Is(err, io.EOF) {
			return lines, nil
		}
		if err != nil {
			return lines, fmt.Errorf("sinktest: reading line %d: %w", n, err)
		}
	}
}

// Message returns the message l describes.
func (l Line) Message() (*message.Message, error) {
	m := &message.Message{
		ID:          l.ID,
		Type:        l.Type,
		Payload:     []byte(l.Payload),
		PayloadJSON: true,
		Headers:     l.Headers,
	}
	switch l.PayloadEncoding {
	case "":
	case "base64":
		var enc string
		if err := json.Unmarshal(l.Payload, &enc); err != nil {
			return nil, fmt.Errorf("message %s: base64 payload: %w", l.ID, err)
		}
		b, err := base64.StdEncoding.DecodeString(enc)
		if err != nil {
			return nil, fmt.Errorf("message %s: base64 payload: %w", l.ID, err)
		}
		m.Payload, m.PayloadJSON = b, false
	default:
		return nil, fmt.Errorf("message %s: unknown payload_encoding %q", l.ID, l.PayloadEncoding)
	}
	if l.Key != nil {
		m.Key, m.HasKey = *l.Key, true
	}
	var err error
	if l.LSN != "" {
		if m.LSN, err = pglogrepl.ParseLSN(l.LSN); err != nil {
			return nil, fmt.Errorf("message %s: lsn: %w", l.ID, err)
		}
	}
	if l.CommitLSN != "" {
		if m.CommitLSN, err = pglogrepl.ParseLSN(l.CommitLSN); err != nil {
			return nil, fmt.Errorf("message %s: commit_lsn: %w", l.ID, err)
		}
	}
	return m, nil
}
