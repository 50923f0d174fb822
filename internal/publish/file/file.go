package file

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/envelope"
)

func init() {
	publish.Register("file", openFile)
	publish.Register("stdout", openStdout)
	publish.Register("discard", openDiscard)
}

// ErrForeign is returned (wrapped) when the file at a file sink's path
// holds something other than the sink's JSON lines. The sink neither
// appends to such a file nor cuts it.
//
// Its text keeps the "publish:" of the package the sink lived in, as
// users have seen it.
var ErrForeign = errors.New("publish: not a JSON-lines file of the file sink")

// Config is the file sink's settings.
type Config struct {
	// Settings are format (raw, the default, or cloudevents) and source
	// (docs/design.md, "Formats"); one file holds one format.
	envelope.Settings `yaml:",inline"`
	// Path of the JSON-lines file; missing parent directories are created.
	// The last component must not be a symbolic link.
	Path string `yaml:"path"`
	// Fsync, default true: a message counts as acknowledged only once it
	// is on disk. false acks after write(2), which survives a crash of the
	// relay but not of the machine.
	Fsync *bool `yaml:"fsync"`
	// Mode is the permission bits, in octal ("0640"), that the file gets
	// when the sink creates it; default "0600". Directories the sink creates
	// get the same bits plus x wherever r is set ("0640" gives 0750; the
	// default gives 0700). The bits are applied as given, the umask does
	// not narrow them; they must include 0600 (the relay reads and writes
	// the file). An existing file or directory keeps its mode.
	Mode string `yaml:"mode"`
}

// Options are OpenContext's settings.
type Options struct {
	// Fsync: acknowledge a batch only once fdatasync returned (see
	// Config.Fsync).
	Fsync bool
	// Mode of the file if the sink creates it; 0 means 0600. Directories
	// it creates get dirMode(Mode). See Config.Mode.
	Mode os.FileMode
	// Log receives the warnings of opening (waiting for the lock, a torn
	// line cut); the zero Logger logs nothing.
	Log zerolog.Logger
	// Envelope is the line format: raw (publish.AppendJSONLine, also the
	// zero value) or cloudevents (publish.AppendCloudEventLine).
	Envelope envelope.Settings
}

// Sink appends messages as JSON lines to a file (format:
// publish.AppendJSONLine) and fdatasyncs before it acknowledges them.
//
// The file is opened with O_APPEND, so every write lands at the end of the
// file as it is at that moment, never at an offset remembered from earlier.
// The sink holds an exclusive flock(2) on the file from open to Close, so
// that two relays on one path (a hot standby that just took over the slot
// and the instance that held it) never write it at once: opening waits,
// logging once, until the other process lets go or ctx ends. The lock is
// advisory: it keeps walpost instances apart, not other programs.
//
// On open, under the lock, the sink checks that the file is its own: empty,
// or with a first and a last complete line in its format (AppendJSONLine's,
// or AppendCloudEventLine's with format: cloudevents, both in publish; a
// file of the other format is refused too, so that one file holds one
// format). A torn last line left by a crash (bytes after the last newline
// that begin like a message line, or are all zero bytes) is cut off; any
// other file is refused with ErrForeign and left untouched. Lines in the
// middle are not read, so opening does not depend on the file's size. A
// failed write is cut back the same way (only the bytes this sink
// appended) before the batch is retried.
//
// Publish and Close must not be called concurrently (the Runner never
// does).
type Sink struct {
	name   string
	path   string
	f      *os.File
	fd     int
	size   int64 // end of the file after the last successful write (or open)
	cutTo  int64 // ≥ 0: a failed write's bytes beyond cutTo are still to cut
	fsync  bool
	env    envelope.Settings
	lines  lines
	closed bool
	// testWrite, when set, replaces the write to f (tests inject failures).
	testWrite func(b []byte) (int, error)
}

func openFile(cfg *config.Sink, log zerolog.Logger) (publish.Opener, error) {
	var fc Config
	if err := cfg.Decode(&fc); err != nil {
		return nil, err
	}
	if fc.Path == "" {
		return nil, errors.New("path: empty (the JSON-lines file to append to)")
	}
	fc.Settings.SetDefaults()
	if err := fc.Settings.Validate(); err != nil {
		return nil, err
	}
	mode := os.FileMode(0o600)
	if fc.Mode != "" {
		m, err := parseFileMode(fc.Mode)
		if err != nil {
			return nil, err
		}
		mode = m
	}
	fsync := fc.Fsync == nil || *fc.Fsync
	return func(ctx context.Context) (publish.Sink, error) {
		s, err := OpenContext(ctx, cfg.Name, fc.Path, Options{Fsync: fsync, Mode: mode, Log: log, Envelope: fc.Settings})
		if err != nil {
			return nil, err
		}
		log.Info().Str("path", fc.Path).Int64("size", s.size).Bool("fsync", fsync).Str("format", fc.Format).Msg("file sink open")
		return s, nil
	}, nil
}

// parseFileMode parses the mode: setting, octal permission bits.
func parseFileMode(s string) (os.FileMode, error) {
	digits := strings.TrimPrefix(strings.TrimPrefix(s, "0o"), "0O")
	m, err := strconv.ParseUint(digits, 8, 32)
	if err != nil || digits == "" || digits[0] == '+' || digits[0] == '-' {
		return 0, fmt.Errorf("mode: %q is not an octal file mode like \"0640\"", s)
	}
	if m > 0o777 {
		return 0, fmt.Errorf("mode: %q is out of range 0..0777 (permission bits only, like \"0640\")", s)
	}
	if m&0o600 != 0o600 {
		return 0, fmt.Errorf("mode: %q does not let the relay read and write the file; give at least 0600, like \"0640\"", s)
	}
	return os.FileMode(m), nil
}

// dirMode is the mode of a directory created for a file of mode m: m plus
// x wherever r is set.
func dirMode(m os.FileMode) os.FileMode { return m | (m&0o444)>>2 }

// Open opens the file at path as OpenContext does, with
// the default mode, no logs, and no end to the wait for the lock.
func Open(name, path string, fsync bool) (*Sink, error) {
	return OpenContext(context.Background(), name, path, Options{Fsync: fsync})
}

// lockPoll is how often opening retries the lock held by another process.
const lockPoll = 100 * time.Millisecond

// OpenContext opens the file at path for appending, creating it
// and its parent directories if needed (see Options.Mode), takes its
// lock, waiting while another process holds it, checks that it is the
// sink's JSON-lines file and cuts a torn last line (see Sink). It
// returns an error wrapping ctx's when ctx ends first, wrapping
// ErrForeign when the file is not the sink's; it never modifies a file
// it refuses.
func OpenContext(ctx context.Context, name, path string, opts Options) (*Sink, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	mode := opts.Mode
	if mode == 0 {
		mode = 0o600
	}
	for {
		f, err := openAppend(path, mode, opts.Fsync)
		if err != nil {
			return nil, err
		}
		s, retry, err := lockAndCheck(ctx, f, name, path, opts)
		if err != nil || !retry {
			if err != nil {
				f.Close()
			}
			return s, err
		}
		// The path names another file by now (it was moved away or
		// replaced while this process waited for the lock): open that.
		f.Close()
	}
}

// lockAndCheck takes f's lock, checks that f is still the file at path
// (retry when not) and repairs its tail.
func lockAndCheck(ctx context.Context, f *os.File, name, path string, opts Options) (s *Sink, retry bool, err error) {
	fd := int(f.Fd())
	if err := lockFile(ctx, fd, path, opts.Log); err != nil {
		return nil, false, err
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, false, fmt.Errorf("path: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, false, fmt.Errorf("path: %s is not a regular file (%s); give the path of a file", path, fi.Mode().Type())
	}
	at, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) || err == nil && !os.SameFile(fi, at) {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("path: %w", err)
	}
	size := fi.Size()
	lf, other := lineFormatOf(&opts.Envelope)
	keep, why, err := checkTail(f, size, lf, other)
	if err != nil {
		return nil, false, fmt.Errorf("path: reading %s: %w", path, err)
	}
	if why != "" {
		return nil, false, fmt.Errorf("path: %s: %w (%s); move it away or point path: elsewhere", path, ErrForeign, why)
	}
	if keep < size {
		if err := f.Truncate(keep); err != nil {
			return nil, false, fmt.Errorf("path: cutting the torn last line of %s: %w", path, err)
		}
		opts.Log.Warn().Str("path", path).Int64("bytes", size-keep).Int64("size", keep).
			Msg("file sink: cut a torn last line (left by a crash in the middle of a write)")
	}
	return &Sink{name: name, path: path, f: f, fd: fd, size: keep, cutTo: -1, fsync: opts.Fsync, env: opts.Envelope}, false, nil
}

// openAppend opens path read-write in append mode without following a
// symbolic link, or creates it (and its directories) with mode.
func openAppend(path string, mode os.FileMode, syncDirs bool) (*os.File, error) {
	const flags = os.O_RDWR | os.O_APPEND | unix.O_NOFOLLOW
	for {
		f, err := os.OpenFile(path, flags, 0)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, openError(path, err)
		}
		dir := filepath.Dir(path)
		if err := mkdirs(dir, dirMode(mode), syncDirs); err != nil {
			return nil, fmt.Errorf("path: %w", err)
		}
		f, err = os.OpenFile(path, flags|os.O_CREATE|os.O_EXCL, mode)
		if errors.Is(err, fs.ErrExist) {
			continue // created meanwhile (or a symlink): open what is there
		}
		if err != nil {
			return nil, openError(path, err)
		}
		if err := f.Chmod(mode); err != nil { // the umask narrowed it
			f.Close()
			return nil, fmt.Errorf("path: %w", err)
		}
		if syncDirs {
			if err := syncDir(dir); err != nil {
				f.Close()
				return nil, fmt.Errorf("path: %w", err)
			}
		}
		return f, nil
	}
}

func openError(path string, err error) error {
	if errors.Is(err, unix.ELOOP) {
		return fmt.Errorf("path: %s is a symbolic link; give the path of the real file (the file sink does not follow a link at the last component)", path)
	}
	return fmt.Errorf("path: %w", err)
}

// mkdirs creates dir and its missing parents with mode perm (not narrowed
// by the umask), fsyncing each parent whose entries changed when sync.
func mkdirs(dir string, perm os.FileMode, sync bool) error {
	fi, err := os.Stat(dir)
	if err == nil {
		if fi.IsDir() {
			return nil
		}
		return &fs.PathError{Op: "mkdir", Path: dir, Err: unix.ENOTDIR}
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := mkdirs(parent, perm, sync); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, perm); err != nil {
		if fi, serr := os.Stat(dir); serr == nil && fi.IsDir() {
			return nil // created meanwhile
		}
		return err
	}
	if err := os.Chmod(dir, perm); err != nil {
		return err
	}
	if sync {
		return syncDir(parent)
	}
	return nil
}

// syncDir fsyncs a directory, making the entries created in it durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// lockFile takes an exclusive flock on fd, retrying every lockPoll while
// another process holds it, until ctx ends; under publish.NoLockWait it
// fails at once with publish.ErrLocked instead.
func lockFile(ctx context.Context, fd int, path string, log zerolog.Logger) error {
	var tick *time.Ticker
	for {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		switch {
		case err == nil:
			if tick != nil {
				tick.Stop()
				log.Info().Str("path", path).Msg("file sink: the other process let go of the file; lock taken")
			}
			return nil
		case errors.Is(err, unix.EINTR):
			continue
		case !errors.Is(err, unix.EWOULDBLOCK):
			return fmt.Errorf("path: locking %s: %w", path, err)
		case !publish.LockWait(ctx):
			return fmt.Errorf("path: %s: %w", path, publish.ErrLocked)
		}
		if tick == nil {
			log.Warn().Str("path", path).
				Msg("file sink: the file is locked by another process (another relay writing it); waiting until it lets go")
			tick = time.NewTicker(lockPoll)
		}
		select {
		case <-ctx.Done():
			tick.Stop()
			return fmt.Errorf("path: waiting for another process to unlock %s: %w", path, context.Cause(ctx))
		case <-tick.C:
		}
	}
}

// lineStart is how every line of publish.AppendJSONLine's format begins.
const lineStart = `{"id":"`

// lineFormat is what the open-time check knows of a line format: how a
// line begins and its string fields that must be there.
type lineFormat struct {
	name   string // the format: setting
	start  string
	fields []string
}

var (
	rawLines = lineFormat{envelope.Raw, lineStart, []string{"id", "lsn", "commit_lsn"}}
	ceLines  = lineFormat{envelope.CloudEvents, publish.CloudEventLineStart, []string{"id", publish.ExtLSN, publish.ExtCommitLSN}}
)

// lineFormatOf returns the line format of env, and other the other one.
func lineFormatOf(env *envelope.Settings) (lf, other lineFormat) {
	if env.IsCloudEvents() {
		return ceLines, rawLines
	}
	return rawLines, ceLines
}

// checkTail reads the file r of the given size and returns how much of it
// to keep: up to and including its last newline. why is non-empty when the
// file is not the sink's: its first or last complete line is not a
// message line of format lf (other is the other format, named in why when
// the line is one of its), or what follows the last newline is not the
// start of one.
func checkTail(r io.ReaderAt, size int64, lf, other lineFormat) (keep int64, why string, err error) {
	nl, err := lastIndexByte(r, size, '\n')
	if err != nil {
		return 0, "", err
	}
	keep = nl + 1
	if keep > 0 {
		first, err := indexByte(r, keep, '\n')
		if err != nil {
			return 0, "", err
		}
		if why, err := checkLine(r, 0, first, lf, other, "its first line"); why != "" || err != nil {
			return 0, why, err
		}
		if first != nl {
			prev, err := lastIndexByte(r, nl, '\n')
			if err != nil {
				return 0, "", err
			}
			what := fmt.Sprintf("its last complete line, at byte %d,", prev+1)
			if why, err := checkLine(r, prev+1, nl-prev-1, lf, other, what); why != "" || err != nil {
				return 0, why, err
			}
		}
	}
	if keep < size {
		ok, err := isTornLine(r, keep, size-keep, lf)
		if err != nil || !ok {
			return 0, fmt.Sprintf("the %d bytes after its last newline are not the start of a message line", size-keep), err
		}
	}
	return keep, "", nil
}

// checkLine returns why the n bytes at off (what, for the message) are
// not a message line of format lf, or "" when they are.
func checkLine(r io.ReaderAt, off, n int64, lf, other lineFormat, what string) (string, error) {
	ok, err := isMessageLine(r, off, n, lf)
	if err != nil || ok {
		return "", err
	}
	if ok, err := isMessageLine(r, off, n, other); err != nil || ok {
		return fmt.Sprintf("%s is a line of format: %s, but the sink writes format: %s (one file holds one format)", what, other.name, lf.name), err
	}
	if lf.name == envelope.Raw {
		return what + " is not a message line " + lineStart + `…","lsn":"…","commit_lsn":"…"}`, nil
	}
	return what + " is not a message line " + publish.CloudEventLineStart + `…","walpostlsn":"…","walpostcommitlsn":"…",…}`, nil
}

// isMessageLine reports whether the n bytes at off are one JSON object of
// format lf: it begins with lf.start and has lf's string fields.
func isMessageLine(r io.ReaderAt, off, n int64, lf lineFormat) (bool, error) {
	if n < int64(len(lf.start)) {
		return false, nil
	}
	head := make([]byte, len(lf.start))
	if _, err := r.ReadAt(head, off); err != nil {
		return false, err
	}
	if string(head) != lf.start {
		return false, nil
	}
	var line map[string]json.RawMessage
	dec := json.NewDecoder(io.NewSectionReader(r, off, n))
	if err := dec.Decode(&line); err != nil {
		var syntax *json.SyntaxError
		var typ *json.UnmarshalTypeError
		if errors.As(err, &syntax) || errors.As(err, &typ) || errors.Is(err, io.ErrUnexpectedEOF) {
			return false, nil
		}
		return false, err
	}
	if dec.InputOffset() != n {
		return false, nil
	}
	for _, f := range lf.fields {
		if v := line[f]; len(v) == 0 || v[0] != '"' {
			return false, nil
		}
	}
	return true, nil
}

// isTornLine reports whether the n bytes at off (with no newline) are what
// a write cut short leaves: the beginning of a message line of format lf,
// or zero bytes (a file system that had extended the file but not written
// the data at a power loss).
func isTornLine(r io.ReaderAt, off, n int64, lf lineFormat) (bool, error) {
	head := make([]byte, min(n, int64(len(lf.start))))
	if _, err := r.ReadAt(head, off); err != nil {
		return false, err
	}
	if strings.HasPrefix(lf.start, string(head)) {
		return true, nil
	}
	buf := make([]byte, min(n, 64<<10))
	for n > 0 {
		c := buf[:min(n, int64(len(buf)))]
		if _, err := r.ReadAt(c, off); err != nil {
			return false, err
		}
		for _, b := range c {
			if b != 0 {
				return false, nil
			}
		}
		off += int64(len(c))
		n -= int64(len(c))
	}
	return true, nil
}

// indexByte returns the offset of the first c in r's first end bytes, or
// -1.
func indexByte(r io.ReaderAt, end int64, c byte) (int64, error) {
	buf := make([]byte, min(end, 64<<10))
	for off := int64(0); off < end; {
		b := buf[:min(end-off, int64(len(buf)))]
		if _, err := r.ReadAt(b, off); err != nil {
			return 0, err
		}
		if i := bytes.IndexByte(b, c); i >= 0 {
			return off + int64(i), nil
		}
		off += int64(len(b))
	}
	return -1, nil
}

// lastIndexByte returns the offset of the last c in r's first end bytes,
// or -1.
func lastIndexByte(r io.ReaderAt, end int64, c byte) (int64, error) {
	buf := make([]byte, min(end, 64<<10))
	for end > 0 {
		n := min(end, int64(len(buf)))
		if _, err := r.ReadAt(buf[:n], end-n); err != nil {
			return 0, err
		}
		if i := bytes.LastIndexByte(buf[:n], c); i >= 0 {
			return end - n + int64(i), nil
		}
		end -= n
	}
	return -1, nil
}

// Name implements publish.Sink.
func (s *Sink) Name() string { return s.name }

// Publish implements publish.Sink: it appends the batch and fdatasyncs
// (unless Fsync is off). On error it cuts off what it appended, so that the retry
// appends after whole lines.
func (s *Sink) Publish(ctx context.Context, msgs []*message.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.cutTo >= 0 {
		if err := s.cut(s.cutTo); err != nil {
			return fmt.Errorf("file sink %s: cutting back the failed write to %s: %w", s.name, s.path, err)
		}
	}
	s.lines.build(msgs, &s.env)
	write := s.f.Write
	if s.testWrite != nil {
		write = s.testWrite
	}
	n, err := s.lines.writeTo(write)
	if err == nil && s.fsync {
		err = unix.Fdatasync(s.fd)
	}
	if err != nil {
		s.cutBack(int64(n))
		return fmt.Errorf("file sink %s: writing %s: %w", s.name, s.path, err)
	}
	// With O_APPEND the offset is the end of what was just written.
	if end, serr := s.f.Seek(0, io.SeekCurrent); serr == nil {
		s.size = end
	} else {
		s.size += int64(n)
	}
	s.lines.release()
	return nil
}

// cutBack removes the n bytes a failed write appended (they are at the
// end: O_APPEND, and the lock keeps other relays out), never cutting below
// s.size, the end of the last successful write, unless the file shrank
// under it. When the cut fails, the next Publish retries it before writing.
func (s *Sink) cutBack(n int64) {
	s.cutTo = s.size
	fi, err := s.f.Stat()
	if err != nil {
		return
	}
	end := fi.Size()
	floor := s.size
	if end < s.size {
		floor = 0 // truncated by someone else (copytruncate): s.size no longer applies
	}
	s.cutTo = max(end-n, floor)
	_ = s.cut(s.cutTo)
}

// cut truncates the file to size if it is longer, and clears the pending
// cut.
func (s *Sink) cut(size int64) error {
	fi, err := s.f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() > size {
		if err := s.f.Truncate(size); err != nil {
			return err
		}
	}
	s.size = min(size, fi.Size())
	s.cutTo = -1
	return nil
}

// Close implements publish.Sink: it releases the lock and closes the file.
// A second call returns os.ErrClosed.
func (s *Sink) Close() error {
	if s.closed {
		return os.ErrClosed
	}
	s.closed = true
	// Closing the descriptor would release the lock too; unlocking first
	// also releases it if a child process briefly shares the descriptor.
	_ = unix.Flock(s.fd, unix.LOCK_UN)
	return s.f.Close()
}
