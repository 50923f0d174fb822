package file

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/envelope"
)

var ceEnv = envelope.Settings{Format: envelope.CloudEvents, Source: "/orders"}

// openWith opens a file sink of the format env says (raw when nil).
func openWith(t *testing.T, p string, env *envelope.Settings) (*Sink, error) {
	t.Helper()
	opts := Options{Log: zerolog.New(zerolog.NewTestWriter(t))}
	if env != nil {
		opts.Envelope = *env
	}
	return OpenContext(context.Background(), "f", p, opts)
}

// TestFileSinkKeepsOneFormatPerFile: a file of CloudEvents lines reopens
// with format: cloudevents (its torn last line cut), and a file of either
// format is refused, unchanged, by a sink of the other, with an error
// naming both formats.
func TestFileSinkKeepsOneFormatPerFile(t *testing.T) {
	dir := t.TempDir()
	ce, raw := filepath.Join(dir, "ce.jsonl"), filepath.Join(dir, "raw.jsonl")
	for _, c := range []struct {
		path string
		env  *envelope.Settings
	}{{ce, &ceEnv}, {raw, nil}} {
		s, err := openWith(t, c.path, c.env)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Publish(context.Background(), []*message.Message{msg("a", `{"n":1}`), msg("b", `{"n":2}`)}); err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
	f, _ := os.OpenFile(ce, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"specversion":"1.0","id":"c","sou`) // a torn line
	f.Close()
	s, err := openWith(t, ce, &ceEnv)
	if err != nil {
		t.Fatalf("reopening a CloudEvents file with format: cloudevents: %v", err)
	}
	if err := s.Publish(context.Background(), []*message.Message{msg("c", `{"n":3}`)}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if ids := fileIDs(t, ce); ids != "a,b,c" {
		t.Errorf("CloudEvents file holds ids %q, want a b c", ids)
	}

	for _, c := range []struct {
		path string
		env  *envelope.Settings
		want string
	}{
		{ce, nil, "is a line of format: cloudevents, but the sink writes format: raw"},
		{raw, &ceEnv, "is a line of format: raw, but the sink writes format: cloudevents"},
	} {
		before, _ := os.ReadFile(c.path)
		_, err := openWith(t, c.path, c.env)
		if !errors.Is(err, ErrForeign) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want ErrForeign saying %q", filepath.Base(c.path), err, c.want)
		}
		if after, _ := os.ReadFile(c.path); !bytes.Equal(before, after) {
			t.Errorf("%s: a refused file was changed", filepath.Base(c.path))
		}
	}
}

// TestFormatSettingOfTheJSONLineSinks: file, stdout and discard accept
// format and source, and their errors name the field.
func TestFormatSettingOfTheJSONLineSinks(t *testing.T) {
	for _, c := range []struct{ doc, want string }{
		{"name: f\nkind: file\npath: /tmp/x\nformat: xml\n", `format: unknown "xml" (raw or cloudevents)`},
		{"name: f\nkind: file\npath: /tmp/x\nsource: /orders\n", "source: only used with format: cloudevents"},
		{"name: f\nkind: stdout\nformat: cloudevents\nsource: \"%zz\"\n", `source: "%zz" is not a URI reference`},
		{"name: f\nkind: discard\nformat: xml\n", `format: unknown "xml"`},
		{"name: f\nkind: file\npath: /tmp/x\nformat: cloudevents\nsource: urn:example:orders\n", ""},
		{"name: f\nkind: stdout\nformat: cloudevents\n", ""},
		{"name: f\nkind: discard\nformat: cloudevents\n", ""},
		{"name: f\nkind: stdout\nfromat: raw\n", "fromat"},
	} {
		_, err := publish.Prepare(0, fileSinkConfig(t, c.doc), zerolog.Nop())
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%q: %v", c.doc, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%q: got %v, want an error containing %q", c.doc, err, c.want)
		}
	}
}
