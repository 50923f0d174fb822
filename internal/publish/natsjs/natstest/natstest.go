// Package natstest gives tests a NATS server with JetStream and small
// helpers around it: a stream of the test's own, created and deleted with
// the test, and a way to read back what a stream holds.
//
// The server at 127.0.0.1:4222 is shared by the whole machine: tests
// isolate themselves by names (Unique), never stop it, and delete what
// they create. NATS 2.9 refuses a stream whose subjects overlap another
// stream's, so every test's stream takes subjects under its own prefix.
//
// Every function fails the test (t.Fatal) on an error; none is safe for
// use after the test ended.
package natstest

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// SharedAddr is the machine's shared server, used when it answers.
const SharedAddr = "127.0.0.1:4222"

// ServerBinary is where Debian's nats-server package installs the server.
const ServerBinary = "/usr/sbin/nats-server"

// Start returns the URL of a NATS server with JetStream: the shared one at
// SharedAddr when it answers with JetStream on, otherwise a private
// nats-server started for the test (stopped at its end, its store in
// t.TempDir()), otherwise it skips the test.
func Start(t testing.TB) string {
	t.Helper()
	if jetStreamAt(SharedAddr) {
		return "nats://" + SharedAddr
	}
	return StartPrivate(t, "")
}

// StartPrivate starts a nats-server of the test's own with JetStream on
// a free port of 127.0.0.1, with extra lines of server configuration
// (accounts, authorization, max_payload; "" for none), and returns its
// URL. It skips the test when the binary is not installed.
func StartPrivate(t testing.TB, conf string) string {
	t.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		if _, serr := os.Stat(ServerBinary); serr != nil {
			t.Skip("no NATS server: 127.0.0.1:4222 does not answer and nats-server is not installed (apt-get install nats-server)")
		}
		bin = ServerBinary
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "nats.conf")
	body := fmt.Sprintf("listen: 127.0.0.1:%d\njetstream {store_dir: %q}\n%s\n", port, filepath.Join(dir, "js"), conf)
	if err := os.WriteFile(cfgFile, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-c", cfgFile)
	logf, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		logf.Close()
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	deadline := time.Now().Add(15 * time.Second)
	for !jetStreamAt(addr) {
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "server.log"))
			t.Fatalf("nats-server on %s did not answer with JetStream within 15s; its log:\n%s", addr, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "nats://" + addr
}

// jetStreamAt reports whether a NATS server answers at addr and announces
// JetStream in its INFO.
func jetStreamAt(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && strings.HasPrefix(line, "INFO ") && strings.Contains(line, `"jetstream":true`)
}

// Unique returns a name no other test uses: "t" and 12 hex digits, legal
// as a stream name and as a subject token.
func Unique(t testing.TB) string {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "t" + hex.EncodeToString(b[:])
}

// Connect connects to url for the test and closes the connection at its
// end.
func Connect(t testing.TB, url string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("connecting to %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// JetStream returns a JetStream context on a connection of the test's own.
func JetStream(t testing.TB, url string) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// CreateStream creates the stream cfg describes (file storage unless cfg
// says otherwise) and deletes it when the test ends.
func CreateStream(t testing.TB, url string, cfg jetstream.StreamConfig) jetstream.Stream {
	t.Helper()
	js := JetStream(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.CreateStream(ctx, cfg)
	if err != nil {
		t.Fatalf("creating stream %s on %v: %v", cfg.Name, cfg.Subjects, err)
	}
	DeleteStreamAtEnd(t, url, cfg.Name)
	return st
}

// DeleteStreamAtEnd deletes the named stream when the test ends, if it
// exists then (for streams that the code under test creates).
func DeleteStreamAtEnd(t testing.TB, url, name string) {
	t.Helper()
	t.Cleanup(func() {
		nc, err := nats.Connect(url)
		if err != nil {
			t.Errorf("deleting stream %s: %v", name, err)
			return
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			t.Errorf("deleting stream %s: %v", name, err)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := js.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Errorf("deleting stream %s: %v", name, err)
		}
	})
}

// Msg is a message as a stream holds it.
type Msg struct {
	Subject string
	Header  nats.Header
	Data    []byte
	Seq     uint64    // stream sequence
	Time    time.Time // when the stream stored it
}

// Read returns every message the named stream holds now, in stream order.
func Read(t testing.TB, url, stream string) []Msg {
	t.Helper()
	js := JetStream(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("reading stream %s: %v", stream, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatalf("reading stream %s: %v", stream, err)
	}
	want := int(info.State.Msgs)
	out := make([]Msg, 0, want)
	if want == 0 {
		return out
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatalf("reading stream %s: %v", stream, err)
	}
	for len(out) < want {
		batch, err := cons.Fetch(min(want-len(out), 1000), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatalf("reading stream %s: %v", stream, err)
		}
		n := len(out)
		for m := range batch.Messages() {
			md, err := m.Metadata()
			if err != nil {
				t.Fatalf("reading stream %s: %v", stream, err)
			}
			out = append(out, Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data(), Seq: md.Sequence.Stream, Time: md.Timestamp})
		}
		if err := batch.Error(); err != nil {
			t.Fatalf("reading stream %s: %v", stream, err)
		}
		if len(out) == n {
			t.Fatalf("reading stream %s: %d of %d messages, then nothing more", stream, n, want)
		}
	}
	return out
}
