package file

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/envelope"
)

// WriterSink writes JSON lines to an io.Writer (stdout) and acknowledges
// after the write returns. Publish must not be called concurrently.
type WriterSink struct {
	name  string
	w     io.Writer
	env   envelope.Settings
	lines lines
}

// NewWriterSink returns a sink writing JSON lines to w (format: raw).
func NewWriterSink(name string, w io.Writer) *WriterSink { return &WriterSink{name: name, w: w} }

// NewWriterSinkFormat returns a sink writing lines of the format env says
// to w (docs/design.md, "Formats").
func NewWriterSinkFormat(name string, w io.Writer, env envelope.Settings) *WriterSink {
	return &WriterSink{name: name, w: w, env: env}
}

// decodeEnvelope decodes a sink kind whose only settings are format and
// source, fills in their defaults and validates them.
func decodeEnvelope(cfg *config.Sink) (envelope.Settings, error) {
	var c struct {
		envelope.Settings `yaml:",inline"`
	}
	if err := cfg.Decode(&c); err != nil {
		return c.Settings, err
	}
	c.Settings.SetDefaults()
	return c.Settings, c.Settings.Validate()
}

func openStdout(cfg *config.Sink, log zerolog.Logger) (publish.Opener, error) {
	env, err := decodeEnvelope(cfg)
	if err != nil {
		return nil, err
	}
	return func(context.Context) (publish.Sink, error) { return NewWriterSinkFormat(cfg.Name, os.Stdout, env), nil }, nil
}

// Name implements publish.Sink.
func (s *WriterSink) Name() string { return s.name }

// Publish implements publish.Sink.
func (s *WriterSink) Publish(ctx context.Context, msgs []*message.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.lines.build(msgs, &s.env)
	_, err := s.lines.writeTo(s.w.Write)
	s.lines.release()
	if err != nil {
		// A closed pipe will not reopen: retrying cannot help.
		if errors.Is(err, unix.EPIPE) || errors.Is(err, os.ErrClosed) {
			return publish.Permanent(fmt.Errorf("stdout sink %s: %w", s.name, err))
		}
		return fmt.Errorf("stdout sink %s: %w", s.name, err)
	}
	return nil
}

// Close implements publish.Sink.
func (s *WriterSink) Close() error { return nil }
