package publish

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/decoder"
)

func init() {
	Register("file", openFile)
	Register("stdout", openStdout)
	Register("discard", openDiscard)
}

// FileConfig is the file sink's settings.
type FileConfig struct {
	// Path of the JSON-lines file; parent directories are created.
	Path string `yaml:"path"`
	// Fsync, default true: a message counts as acknowledged only once it
	// is on disk. false acks after write(2), which survives a crash of the
	// relay but not of the machine.
	Fsync *bool `yaml:"fsync"`
}

// FileSink appends messages as JSON lines to a file (format: AppendJSONLine)
// and fsyncs before it acknowledges them. On open, a torn last line left by
// a crash is cut back, so the file always holds whole lines; a failed write
// is cut back the same way before the batch is retried.
//
// Publish must not be called concurrently (the Runner never does).
type FileSink struct {
	name  string
	path  string
	f     *os.File
	size  int64 // bytes of whole lines in the file
	fsync bool
	buf   []byte
}

func openFile(cfg *config.Sink, log zerolog.Logger) (Opener, error) {
	var fc FileConfig
	if err := cfg.Decode(&fc); err != nil {
		return nil, err
	}
	if fc.Path == "" {
		return nil, errors.New("path: empty (the JSON-lines file to append to)")
	}
	fsync := fc.Fsync == nil || *fc.Fsync
	return func(ctx context.Context) (Sink, error) {
		s, err := OpenFileSink(cfg.Name, fc.Path, fsync)
		if err != nil {
			return nil, err
		}
		log.Info().Str("path", fc.Path).Int64("size", s.size).Bool("fsync", fsync).Msg("file sink open")
		return s, nil
	}, nil
}

// OpenFileSink opens (creating it if needed) the file at path, cutting a
// torn last line.
func OpenFileSink(name, path string, fsync bool) (*FileSink, error) {
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("path: %w", err)
		}
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("path: %w", err)
	}
	size, err := wholeLines(f)
	if err == nil {
		err = f.Truncate(size)
	}
	if err == nil {
		_, err = f.Seek(size, io.SeekStart)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("path: recovering %s: %w", path, err)
	}
	return &FileSink{name: name, path: path, f: f, size: size, fsync: fsync}, nil
}

// wholeLines returns the length of the file up to and including its last
// newline.
func wholeLines(f *os.File) (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	end := st.Size()
	buf := make([]byte, 64<<10)
	for end > 0 {
		n := int64(len(buf))
		if n > end {
			n = end
		}
		if _, err := f.ReadAt(buf[:n], end-n); err != nil {
			return 0, err
		}
		if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
			return end - n + int64(i) + 1, nil
		}
		end -= n
	}
	return 0, nil
}

// Name implements Sink.
func (s *FileSink) Name() string { return s.name }

// Publish implements Sink: it writes the batch and fsyncs.
func (s *FileSink) Publish(ctx context.Context, msgs []*decoder.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.buf = s.buf[:0]
	for _, m := range msgs {
		s.buf = AppendJSONLine(s.buf, m)
	}
	_, err := s.f.Write(s.buf)
	if err == nil && s.fsync {
		err = unix.Fdatasync(int(s.f.Fd()))
	}
	if err != nil {
		// Cut back to whole lines so the retry appends after valid data.
		if terr := s.f.Truncate(s.size); terr == nil {
			_, _ = s.f.Seek(s.size, io.SeekStart)
		}
		return fmt.Errorf("file sink %s: writing %s: %w", s.name, s.path, err)
	}
	s.size += int64(len(s.buf))
	if cap(s.buf) > 4<<20 {
		s.buf = nil // do not keep a huge batch's buffer
	}
	return nil
}

// Close implements Sink.
func (s *FileSink) Close() error { return s.f.Close() }

// WriterSink writes JSON lines to an io.Writer (stdout) and acknowledges
// after the write returns. Publish must not be called concurrently.
type WriterSink struct {
	name string
	w    io.Writer
	buf  []byte
}

// NewWriterSink returns a sink writing JSON lines to w.
func NewWriterSink(name string, w io.Writer) *WriterSink { return &WriterSink{name: name, w: w} }

func openStdout(cfg *config.Sink, log zerolog.Logger) (Opener, error) {
	var none struct{}
	if err := cfg.Decode(&none); err != nil {
		return nil, err
	}
	return func(context.Context) (Sink, error) { return NewWriterSink(cfg.Name, os.Stdout), nil }, nil
}

// Name implements Sink.
func (s *WriterSink) Name() string { return s.name }

// Publish implements Sink.
func (s *WriterSink) Publish(ctx context.Context, msgs []*decoder.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.buf = s.buf[:0]
	for _, m := range msgs {
		s.buf = AppendJSONLine(s.buf, m)
	}
	if _, err := s.w.Write(s.buf); err != nil {
		// A closed pipe will not reopen: retrying cannot help.
		if errors.Is(err, unix.EPIPE) || errors.Is(err, os.ErrClosed) {
			return Permanent(fmt.Errorf("stdout sink %s: %w", s.name, err))
		}
		return fmt.Errorf("stdout sink %s: %w", s.name, err)
	}
	return nil
}

// Close implements Sink.
func (s *WriterSink) Close() error { return nil }

// DiscardSink acknowledges every message at once and keeps nothing. It
// exists to measure the relay without a destination (the benchmark's
// walpost→discard row); it is never what a deployment wants.
type DiscardSink struct{ name string }

func openDiscard(cfg *config.Sink, log zerolog.Logger) (Opener, error) {
	var none struct{}
	if err := cfg.Decode(&none); err != nil {
		return nil, err
	}
	return func(context.Context) (Sink, error) {
		log.Warn().Msg("discard sink: messages are acknowledged and dropped (for benchmarks only)")
		return DiscardSink{cfg.Name}, nil
	}, nil
}

// Name implements Sink.
func (s DiscardSink) Name() string { return s.name }

// Publish implements Sink.
func (s DiscardSink) Publish(ctx context.Context, msgs []*decoder.Message) error { return ctx.Err() }

// Close implements Sink.
func (s DiscardSink) Close() error { return nil }
