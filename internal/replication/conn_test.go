package replication

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// Tests of pgConn, the production conn, on the wire: a real
// *pgconn.PgConn over loopback TCP, its server side played by the test.

// wirePair returns a pgConn over loopback TCP, already in replication
// (COPY BOTH) mode as far as the test's server end is concerned, and that
// server end.
func wirePair(t *testing.T) (*pgConn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close() })
	cfg, err := pgconn.ParseConfig("postgres://x@127.0.0.1/x")
	if err != nil {
		t.Fatal(err)
	}
	cfg.BuildFrontend = func(r io.Reader, w io.Writer) *pgproto3.Frontend {
		return pgproto3.NewFrontend(newCutReader(r, DefaultMaxMessageBytes, nil), w)
	}
	pg, err := pgconn.Construct(&pgconn.HijackedConn{Conn: client, TxStatus: 'I', Config: cfg,
		ParameterStatuses: map[string]string{}})
	if err != nil {
		t.Fatal(err)
	}
	c := newPgConn(pg)
	t.Cleanup(c.Close)
	return c, server
}

func TestPgConnStatusUpdateReportsThePositionAsWriteFlushAndApply(t *testing.T) {
	c, server := wirePair(t)
	clientTime := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	if err := c.SendStatus(0x16B3748, clientTime); err != nil {
		t.Fatal(err)
	}
	be := pgproto3.NewBackend(server, server)
	_ = server.SetReadDeadline(time.Now().Add(10 * time.Second))
	msg, err := be.Receive()
	if err != nil {
		t.Fatal(err)
	}
	cd, ok := msg.(*pgproto3.CopyData)
	if !ok || len(cd.Data) != 34 || cd.Data[0] != pglogrepl.StandbyStatusUpdateByteID {
		t.Fatalf("got %T %v, want a 34-byte standby status update", msg, msg)
	}
	for i, name := range []string{"write", "flush", "apply"} {
		if got := pglogrepl.LSN(binary.BigEndian.Uint64(cd.Data[1+8*i:])); got != 0x16B3748 {
			t.Errorf("%s position %v, want 0/16B3748", name, got)
		}
	}
	if got := int64(binary.BigEndian.Uint64(cd.Data[25:])); got != clientTime.Sub(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).Microseconds() {
		t.Errorf("client time %d µs since 2000, want the time given", got)
	}
	if cd.Data[33] != 0 {
		t.Error("the status update asks the server for a reply")
	}
}

// A deadline that fires in the middle of a message is harmless: the next
// read resumes it. The stream relies on this (doc.go).
func TestPgConnReadDeadlineIsErrReadDeadlineAndACutMessageIsResumed(t *testing.T) {
	c, server := wirePair(t)
	wire, err := xLogData(0x100, 0, insertMsg(100)).Encode(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := server.Write(wire[:60]); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := c.ReceiveMessage(); !errors.Is(err, errReadDeadline) {
		t.Fatalf("read with half a message and a deadline: %v, want errReadDeadline", err)
	}
	if _, err := server.Write(wire[60:]); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	msg, err := c.ReceiveMessage()
	if err != nil {
		t.Fatalf("read after the deadline: %v", err)
	}
	cd, ok := msg.(*pgproto3.CopyData)
	if !ok || len(cd.Data) != 125 || pglogrepl.LSN(binary.BigEndian.Uint64(cd.Data[1:])) != 0x100 {
		t.Fatalf("got %T %v, want the XLogData cut by the deadline, whole", msg, msg)
	}
	_ = c.SetReadDeadline(pastDeadline)
	if _, err := c.ReceiveMessage(); !errors.Is(err, errReadDeadline) {
		t.Fatalf("read with nothing buffered and pastDeadline: %v, want errReadDeadline", err)
	}
}

func TestStartErrorSaysWhetherToWaitRetryOrStop(t *testing.T) {
	for _, tc := range []struct {
		code         string
		active, stop bool
	}{
		{"55006", true, false},
		{"42704", false, true},
		{"42501", false, true},
		{"28P01", false, true},
		{"57P01", false, false},
	} {
		err := startError("s", &pgconn.PgError{Code: tc.code, Message: "m"})
		if errors.Is(err, errSlotActive) != tc.active || isFatal(err) != tc.stop {
			t.Errorf("%s: %v: slot active %v, fatal %v; want %v, %v", tc.code, err, errors.Is(err, errSlotActive), isFatal(err), tc.active, tc.stop)
		}
	}
	if err := startError("s", errors.New("EOF")); errors.Is(err, errSlotActive) || isFatal(err) {
		t.Errorf("a broken connection: %v, want a retry", err)
	}
}

func TestIsTimeoutFindsATimeoutAnywhereInTheChainOnly(t *testing.T) {
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{timeout, true},
		{fmt.Errorf("receive message failed: %w", fmt.Errorf("timeout: %w", timeout)), true},
		{fmt.Errorf("receive message failed: %w", io.EOF), false},
		{&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, false},
	} {
		if got := isTimeout(tc.err); got != tc.want {
			t.Errorf("isTimeout(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	if a := testing.AllocsPerRun(100, func() { isTimeout(timeout) }); a != 0 {
		t.Errorf("%.1f allocations per call, want 0", a)
	}
}
