// Package rabbittest gives tests a real RabbitMQ: the server the machine
// runs at 127.0.0.1:5672 (Debian's rabbitmq-server package, user
// guest/guest, vhost "/"), with per-test exchanges and queues.
//
// Unlike internal/pgtest, which starts a private PostgreSQL, this package
// does not start a server: a private RabbitMQ (an Erlang VM, epmd, a node
// name, a cookie) takes several seconds and a few hundred megabytes to
// start, too heavy for every test binary. Start skips the test, naming the
// package to install, when nothing answers. Because the server is shared
// by the whole machine, a test never stops it or changes its settings:
// every test declares its own exchange and queue under unique names
// (Declare, Name), and deletes them when it ends. Outages are simulated
// between the client and the server with internal/tcpproxy.
//
// Queues are declared with x-expires, so that a test binary killed before
// its cleanup leaves nothing behind for long; exchanges are auto-delete,
// and go with their last binding.
//
// The helpers fail the test on any error. They open a connection per call
// and are safe for concurrent use.
package rabbittest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

const (
	// Addr is where the shared server listens.
	Addr = "127.0.0.1:5672"
	// URL is the shared server's AMQP URL with the default guest user.
	URL = "amqp://guest:guest@" + Addr + "/"
	// QueueExpiry is the x-expires of the queues Declare makes: a queue
	// nobody uses for this long is deleted by the server.
	QueueExpiry = 15 * time.Minute
)

// Start returns the AMQP URL of the machine's RabbitMQ, or skips the test
// when it does not answer.
func Start(t testing.TB) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", Addr, 2*time.Second)
	if err != nil {
		t.Skipf("rabbittest: no RabbitMQ at %s (%v): install and start the Debian package rabbitmq-server "+
			"(apt-get install rabbitmq-server) to run this test", Addr, err)
	}
	c.Close()
	conn, err := amqp.DialConfig(URL, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		t.Skipf("rabbittest: RabbitMQ at %s refuses guest/guest (%v): this test needs the default guest user, "+
			"which RabbitMQ allows from localhost", Addr, err)
	}
	conn.Close()
	return URL
}

// Name returns prefix followed by a random suffix: a name no other test on
// the machine uses.
func Name(prefix string) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return prefix + "." + hex.EncodeToString(b[:])
}

// Topology is one test's exchange and queue, the queue bound to the
// exchange.
type Topology struct {
	// URL is the server's URL (Start's).
	URL string
	// Exchange is the exchange's name (default: a Name("walpost.test.x")).
	Exchange string
	// Kind is the exchange type (default topic).
	Kind string
	// Queue is the queue's name (default: a Name("walpost.test.q")).
	Queue string
	// BindingKey binds Queue to Exchange (default "#": every routing key
	// of a topic exchange).
	BindingKey string
	// QueueArgs are extra queue arguments (x-max-length, x-overflow, …);
	// x-expires is added.
	QueueArgs amqp.Table
}

// Declare declares the exchange (durable, auto-delete) and the queue
// (durable, with x-expires), binds them, and deletes both when the test
// ends. Fields left empty get their defaults; the returned Topology holds
// every name.
func Declare(t testing.TB, url string, top Topology) *Topology {
	t.Helper()
	tp := top
	tp.URL = url
	if tp.Exchange == "" {
		tp.Exchange = Name("walpost.test.x")
	}
	if tp.Kind == "" {
		tp.Kind = amqp.ExchangeTopic
	}
	if tp.Queue == "" {
		tp.Queue = Name("walpost.test.q")
	}
	if tp.BindingKey == "" {
		tp.BindingKey = "#"
	}
	args := amqp.Table{"x-expires": int32(QueueExpiry / time.Millisecond)}
	for k, v := range top.QueueArgs {
		args[k] = v
	}
	With(t, url, func(ch *amqp.Channel) error {
		if err := ch.ExchangeDeclare(tp.Exchange, tp.Kind, true, true, false, false, nil); err != nil {
			return err
		}
		if _, err := ch.QueueDeclare(tp.Queue, true, false, false, false, args); err != nil {
			return err
		}
		return ch.QueueBind(tp.Queue, tp.BindingKey, tp.Exchange, false, nil)
	})
	t.Cleanup(func() { tp.Delete(t) })
	return &tp
}

// Delete deletes the topology's queue and exchange; either may be gone
// already.
func (tp *Topology) Delete(t testing.TB) {
	t.Helper()
	DeleteQueue(t, tp.URL, tp.Queue)
	DeleteExchange(t, tp.URL, tp.Exchange)
}

// DeleteQueue deletes a queue, whatever it holds; a missing one is no
// error.
func DeleteQueue(t testing.TB, url, queue string) {
	t.Helper()
	With(t, url, func(ch *amqp.Channel) error {
		_, err := ch.QueueDelete(queue, false, false, false)
		return err
	})
}

// DeleteExchange deletes an exchange; a missing one is no error.
func DeleteExchange(t testing.TB, url, exchange string) {
	t.Helper()
	With(t, url, func(ch *amqp.Channel) error { return ch.ExchangeDelete(exchange, false, false) })
}

// ExchangeExists reports whether the exchange exists.
func ExchangeExists(t testing.TB, url, exchange string) bool {
	t.Helper()
	exists := true
	With(t, url, func(ch *amqp.Channel) error {
		err := ch.ExchangeDeclarePassive(exchange, amqp.ExchangeTopic, true, false, false, false, nil)
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.NotFound {
			exists = false
			return nil
		}
		return err
	})
	return exists
}

// Drain returns the messages the queue holds now, in queue order, and
// removes them (basic.get with automatic acknowledgement until the queue
// is empty).
func Drain(t testing.TB, url, queue string) []amqp.Delivery {
	t.Helper()
	var out []amqp.Delivery
	With(t, url, func(ch *amqp.Channel) error {
		for {
			d, ok, err := ch.Get(queue, true)
			if err != nil || !ok {
				return err
			}
			out = append(out, d)
		}
	})
	return out
}

// Await drains the queue until it has returned at least n messages in
// all, or fails the test after timeout; it returns every message drained.
func Await(t testing.TB, url, queue string, n int, timeout time.Duration) []amqp.Delivery {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var out []amqp.Delivery
	for {
		out = append(out, Drain(t, url, queue)...)
		if len(out) >= n {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("rabbittest: queue %s gave %d messages within %s, want %d", queue, len(out), timeout, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Publish publishes msgs to exchange with routing key key, persistent
// unless a publishing sets DeliveryMode, and waits for RabbitMQ's confirm
// of each; a nack or a return (they are mandatory) fails the test. The
// default exchange "" routes to the queue named key.
func Publish(t testing.TB, url, exchange, key string, msgs ...amqp.Publishing) {
	t.Helper()
	With(t, url, func(ch *amqp.Channel) error {
		if err := ch.Confirm(false); err != nil {
			return err
		}
		returns := ch.NotifyReturn(make(chan amqp.Return, len(msgs)))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, m := range msgs {
			if m.DeliveryMode == 0 {
				m.DeliveryMode = amqp.Persistent
			}
			dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, true, false, m)
			if err != nil {
				return err
			}
			if ok, err := dc.WaitContext(ctx); err != nil || !ok {
				return errors.Join(errors.New("rabbittest: publish not confirmed"), err)
			}
			select {
			case r := <-returns:
				t.Fatalf("rabbittest: message %q to exchange %q, key %q returned: %d %s", r.MessageId, exchange, key, r.ReplyCode, r.ReplyText)
			default:
			}
		}
		return nil
	})
}

// With runs f on a fresh channel of a fresh connection to url and closes
// both; an error of f fails the test.
func With(t testing.TB, url string, f func(ch *amqp.Channel) error) {
	t.Helper()
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(10 * time.Second)})
	if err != nil {
		t.Fatalf("rabbittest: connecting: %v", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("rabbittest: opening a channel: %v", err)
	}
	if err := f(ch); err != nil {
		t.Fatalf("rabbittest: %v", err)
	}
	ch.Close()
}
