package main

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestBrokerTargetsAreCreatedAndDeleted creates a run's stream and a run's
// exchange and queue on the machine's servers, and checks that remove
// leaves nothing behind; a server that does not answer skips its part.
func TestBrokerTargetsAreCreatedAndDeleted(t *testing.T) {
	t.Run("nats", func(t *testing.T) {
		bt, err := natsStream()
		if err != nil && isSkipped(err.Error()) {
			t.Skip(err)
		}
		if err != nil {
			t.Fatal(err)
		}
		if n, err := bt.stored(); err != nil || n != 0 {
			t.Fatalf("a new stream holds %d (%v)", n, err)
		}
		if !strings.HasPrefix(bt.dest.NATSStream, "WPBENCH_") || !strings.HasSuffix(bt.dest.NATSSubject, ".{type}") {
			t.Fatalf("dest %+v", bt.dest)
		}
		if err := bt.remove(); err != nil {
			t.Fatal(err)
		}
		nc, err := nats.Connect(natsURL)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		js, _ := jetstream.New(nc)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := js.Stream(ctx, bt.dest.NATSStream); !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Fatalf("stream %s after remove: %v, want not found", bt.dest.NATSStream, err)
		}
	})
	t.Run("rabbitmq", func(t *testing.T) {
		bt, err := rabbitTopology()
		if err != nil && isSkipped(err.Error()) {
			t.Skip(err)
		}
		if err != nil {
			t.Fatal(err)
		}
		if n, err := bt.stored(); err != nil || n != 0 {
			t.Fatalf("a new queue holds %d (%v)", n, err)
		}
		if err := bt.remove(); err != nil {
			t.Fatal(err)
		}
		if _, err := bt.stored(); err == nil || !strings.Contains(err.Error(), "404") {
			t.Fatalf("queue after remove: %v, want 404 NOT_FOUND", err)
		}
	})
}

// TestUnreachableBrokerIsSkipped points the bench at a port nothing
// listens on: the run is skipped, naming the server, not failed.
func TestUnreachableBrokerIsSkipped(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	saved := [4]string{natsAddr, natsURL, rabbitAddr, rabbitURL}
	defer func() { natsAddr, natsURL, rabbitAddr, rabbitURL = saved[0], saved[1], saved[2], saved[3] }()
	natsAddr, natsURL = closed, "nats://"+closed
	rabbitAddr, rabbitURL = closed, "amqp://guest:guest@"+closed+"/"
	if _, err := natsStream(); err == nil || !isSkipped(err.Error()) || !strings.Contains(err.Error(), "no NATS server at "+closed) {
		t.Errorf("nats: %v", err)
	}
	if _, err := rabbitTopology(); err == nil || !isSkipped(err.Error()) || !strings.Contains(err.Error(), "no RabbitMQ at "+closed) {
		t.Errorf("rabbitmq: %v", err)
	}
}
