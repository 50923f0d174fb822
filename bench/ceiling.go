package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// pgEpoch is PostgreSQL's timestamp epoch; pgoutput times are µs after it.
var pgEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// pgoutputReader reads what pg_recvlogical writes for the pgoutput plugin
// (protocol version 1): each message's bytes followed by a newline. The
// messages are binary and may themselves hold newline bytes, so it parses
// each message by its layout instead of splitting lines; it needs only the
// Begin (commit time), Insert and Commit messages, and skips the others.
type pgoutputReader struct {
	r          *bufio.Reader
	commitTime time.Time
	// OnInsert is called for each Insert with its transaction's commit time.
	OnInsert func(commitTime time.Time)
	// OnCommit is called for each Commit with the end LSN of its record.
	OnCommit func(end uint64)
}

var errFraming = errors.New("pg_recvlogical output: message not followed by a newline")

// Next reads one message and its newline; io.EOF at a clean end.
func (p *pgoutputReader) Next() (byte, error) {
	kind, err := p.r.ReadByte()
	if err != nil {
		return 0, err
	}
	switch kind {
	case 'B': // final LSN, commit time, xid
		var b [20]byte
		if _, err := io.ReadFull(p.r, b[:]); err != nil {
			return kind, unexpected(err)
		}
		us := int64(binary.BigEndian.Uint64(b[8:16]))
		p.commitTime = pgEpoch.Add(time.Duration(us) * time.Microsecond)
	case 'C': // flags, commit LSN, end LSN, commit time
		var b [25]byte
		if _, err := io.ReadFull(p.r, b[:]); err != nil {
			return kind, unexpected(err)
		}
		if p.OnCommit != nil {
			p.OnCommit(binary.BigEndian.Uint64(b[9:17]))
		}
	case 'I': // relation id, 'N', tuple
		if _, err := p.r.Discard(5); err != nil {
			return kind, unexpected(err)
		}
		if err := p.skipTuple(); err != nil {
			return kind, err
		}
		if p.OnInsert != nil {
			p.OnInsert(p.commitTime)
		}
	case 'R': // relation id, namespace, name, replica identity, columns
		if _, err := p.r.Discard(4); err != nil {
			return kind, unexpected(err)
		}
		if err := p.skipStrings(2); err != nil {
			return kind, err
		}
		var b [3]byte
		if _, err := io.ReadFull(p.r, b[:]); err != nil {
			return kind, unexpected(err)
		}
		for range int(binary.BigEndian.Uint16(b[1:3])) {
			if _, err := p.r.Discard(1); err != nil {
				return kind, unexpected(err)
			}
			if err := p.skipStrings(1); err != nil {
				return kind, err
			}
			if _, err := p.r.Discard(8); err != nil {
				return kind, unexpected(err)
			}
		}
	case 'Y': // type id, namespace, name
		if _, err := p.r.Discard(4); err != nil {
			return kind, unexpected(err)
		}
		if err := p.skipStrings(2); err != nil {
			return kind, err
		}
	case 'O': // origin LSN, name
		if _, err := p.r.Discard(8); err != nil {
			return kind, unexpected(err)
		}
		if err := p.skipStrings(1); err != nil {
			return kind, err
		}
	default:
		return kind, fmt.Errorf("pg_recvlogical output: unexpected pgoutput message %q", kind)
	}
	nl, err := p.r.ReadByte()
	if err != nil {
		return kind, unexpected(err)
	}
	if nl != '\n' {
		return kind, errFraming
	}
	return kind, nil
}

func (p *pgoutputReader) skipStrings(n int) error {
	for range n {
		for {
			_, err := p.r.ReadSlice(0)
			if err == nil {
				break
			}
			if !errors.Is(err, bufio.ErrBufferFull) {
				return unexpected(err)
			}
		}
	}
	return nil
}

func (p *pgoutputReader) skipTuple() error {
	var b [4]byte
	if _, err := io.ReadFull(p.r, b[:2]); err != nil {
		return unexpected(err)
	}
	for range int(binary.BigEndian.Uint16(b[:2])) {
		k, err := p.r.ReadByte()
		if err != nil {
			return unexpected(err)
		}
		switch k {
		case 'n', 'u':
		case 't', 'b':
			if _, err := io.ReadFull(p.r, b[:4]); err != nil {
				return unexpected(err)
			}
			if _, err := p.r.Discard(int(binary.BigEndian.Uint32(b[:4]))); err != nil {
				return unexpected(err)
			}
		default:
			return fmt.Errorf("pg_recvlogical output: unexpected tuple column kind %q", k)
		}
	}
	return nil
}

func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// recvlogical runs pg_recvlogical on a slot with the pgoutput plugin and
// reads its output: the ceiling, the stream's own speed with no relay work.
type recvlogical struct {
	cmd     *exec.Cmd
	stderr  bytes.Buffer
	inserts atomic.Int64
	target  int64
	reached chan struct{} // closed when inserts reaches target
	at      time.Time     // when it did
	mu      sync.Mutex
	hist    *Hist // commit time → read by the bench, per message
	done    chan struct{}
	err     error // the reader's error, after done
	tail    *tailReader
}

// tailReader reads a file that another process appends to, polling every
// millisecond for more; it ends (io.EOF) once the writer exited and
// everything written was read.
type tailReader struct {
	f      *os.File
	exited chan struct{}
}

func (t *tailReader) Read(p []byte) (int, error) {
	for {
		n, err := t.f.Read(p)
		if n > 0 {
			return n, nil
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		select {
		case <-t.exited:
			n, err := t.f.Read(p)
			if n > 0 {
				return n, nil
			}
			if err == nil {
				err = io.EOF
			}
			return 0, err
		case <-time.After(time.Millisecond):
		}
	}
}

// startRecvlogical starts pg_recvlogical. With file == "" it writes to a
// pipe the bench reads as the bytes come (for latency); else it writes to
// that file, which the bench tails every millisecond (for throughput: a
// pipe read as fast as it is written wakes the reader twice per message,
// since pg_recvlogical writes each message and its newline separately, and
// on 2 cores those wake-ups slow the stream itself).
func startRecvlogical(bin string, port int, n names, target int64, file string) (*recvlogical, error) {
	dest := "-"
	if file != "" {
		dest = file
	}
	cmd := exec.Command(bin, "-h", "127.0.0.1", "-p", strconv.Itoa(port), "-U", "postgres", "-d", "postgres",
		"--slot", n.Slot, "--start", "--no-loop", "-F", "0", "-f", dest,
		"-o", "proto_version=1", "-o", "publication_names="+n.Publication)
	rl := &recvlogical{cmd: cmd, target: target, reached: make(chan struct{}), hist: NewHist(), done: make(chan struct{})}
	cmd.Stderr = &rl.stderr
	var out io.Reader
	if file == "" {
		pipe, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		out = pipe
	} else {
		f, err := os.Create(file)
		if err != nil {
			return nil, err
		}
		t := &tailReader{f: f, exited: make(chan struct{})}
		rl.tail = t
		out = t
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	if rl.tail != nil {
		go func() { rl.cmd.Wait(); close(rl.tail.exited) }()
	}
	go func() {
		defer close(rl.done)
		rd := &pgoutputReader{r: bufio.NewReaderSize(out, 1<<20)}
		rd.OnInsert = func(ct time.Time) {
			now := time.Now()
			rl.mu.Lock()
			rl.hist.Observe(now.Sub(ct).Seconds())
			rl.mu.Unlock()
			if rl.inserts.Add(1) == rl.target {
				rl.at = now
				close(rl.reached)
			}
		}
		for {
			if _, err := rd.Next(); err != nil {
				if !errors.Is(err, io.EOF) {
					rl.err = err
				}
				io.Copy(io.Discard, out)
				return
			}
		}
	}()
	return rl, nil
}

// Hist returns a copy of the latency histogram.
func (rl *recvlogical) Hist() *Hist {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	return &Hist{Bounds: rl.hist.Bounds, Counts: append([]float64(nil), rl.hist.Counts...)}
}

// alive returns an error once pg_recvlogical's output ended.
func (rl *recvlogical) alive() error {
	select {
	case <-rl.done:
		return fmt.Errorf("pg_recvlogical stopped: %v; %s", rl.err, rl.stderr.String())
	default:
		return nil
	}
}

// wait waits until target inserts were read or timeout passes.
func (rl *recvlogical) wait(timeout time.Duration) (time.Time, error) {
	select {
	case <-rl.reached:
		return rl.at, nil
	case <-rl.done:
		return time.Time{}, rl.alive()
	case <-time.After(timeout):
		return time.Time{}, fmt.Errorf("pg_recvlogical read %d of %d inserts in %v", rl.inserts.Load(), rl.target, timeout)
	}
}

// stop reads the peak RSS, then stops pg_recvlogical with SIGINT (its
// clean stop) and returns its CPU seconds and peak RSS.
func (rl *recvlogical) stop() (cpu, rssMB float64, err error) {
	pid := rl.cmd.Process.Pid
	rssMB, _ = peakRSSMB(pid)
	_ = rl.cmd.Process.Signal(syscall.SIGINT)
	waitErr := make(chan error, 1)
	if rl.tail != nil {
		go func() { <-rl.tail.exited; waitErr <- nil }()
	} else {
		go func() { waitErr <- rl.cmd.Wait() }()
	}
	select {
	case err = <-waitErr:
	case <-time.After(10 * time.Second):
		_ = rl.cmd.Process.Kill()
		err = <-waitErr
	}
	<-rl.done
	if rl.tail != nil {
		rl.tail.f.Close()
	}
	if ps := rl.cmd.ProcessState; ps != nil {
		cpu = (ps.UserTime() + ps.SystemTime()).Seconds()
	}
	if rl.err != nil {
		return cpu, rssMB, rl.err
	}
	if err != nil && rl.cmd.ProcessState != nil && rl.cmd.ProcessState.ExitCode() != 0 {
		if os.Getenv("BENCH_DEBUG") != "" {
			fmt.Fprintln(os.Stderr, "pg_recvlogical:", rl.stderr.String())
		}
		return cpu, rssMB, nil // SIGINT ends it with status 0 or 1 depending on version
	}
	return cpu, rssMB, nil
}
