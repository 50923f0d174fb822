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

// jsonLine is one line of the file and stdout sinks (docs/design.md):
// {"id":…,"type":…,"key":…,"payload":<JSON>,"headers":{…},"lsn":"0/16B3748","commit_lsn":"0/16B37A0"}
type jsonLine struct {
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
	br := bufio.NewReader(r)
	var msgs []*message.Message
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			m, perr := parseJSONLine(line)
			if perr != nil {
				return msgs, fmt.Errorf("sinktest: line %d: %w", n, perr)
			}
			msgs = append(msgs, m)
		}
		if errors.Is(err, io.EOF) {
			return msgs, nil
		}
		if err != nil {
			return msgs, fmt.Errorf("sinktest: reading line %d: %w", n, err)
		}
	}
}

func parseJSONLine(line []byte) (*message.Message, error) {
	var l jsonLine
	dec := json.NewDecoder(bytes.NewReader(line))
	if err := dec.Decode(&l); err != nil {
		return nil, err
	}
	if l.ID == "" {
		return nil, errors.New(`no "id"`)
	}
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
