package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/publish/natsjs/natstest"
	"github.com/walpost/walpost/internal/publish/rabbitmq/rabbittest"
)

// The tests of a newcomer's first day (issue 47): what the operator
// meets at start, in the config and in each command's errors.

// TestIntegrationBrokerLackingACapabilityStopsAtStart: with an idle
// outbox, a nats sink with columns.deliver_at on a server without message
// schedules (the machine's 2.9), and a rabbitmq sink with exchange_type:
// x-delayed-message on a server without the plugin, stop cdc run at
// start (exit 1, naming what is missing) before it logs "streaming",
// instead of streaming until the first message (docs/design.md,
// "Start-up checks").
func TestIntegrationBrokerLackingACapabilityStopsAtStart(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	t.Run("nats", func(t *testing.T) {
		t.Parallel()
		natsURL := natstest.Start(t)
		nc := natstest.Connect(t, natsURL)
		v := nc.ConnectedServerVersion()
		nc.Close()
		if !strings.HasPrefix(v, "2.9.") && !strings.HasPrefix(v, "2.10.") && !strings.HasPrefix(v, "2.11.") {
			t.Skipf("the machine's nats-server is %s, which has message schedules", v)
		}
		ob := scheduledOutbox(t, url)
		cfg := ob.Config(t, fmt.Sprintf("  - {name: n, kind: nats, servers: [%q], subject: 'idle.{type}', schedule_subject: idle.scheduled}", natsURL), scheduleColumns)
		cdcInit(t, cfg)
		p := startCDC(t, "run", "--config", cfg)
		code := p.Wait(30 * time.Second)
		log := p.Stderr.String()
		if code != 1 || !strings.Contains(log, "columns.deliver_at needs (nats-server 2.12.0 or later)") || strings.Contains(log, "streaming") {
			p.Cmd.Process.Kill()
			t.Fatalf("exit %d (-1: still running), want 1 at start, before streaming, saying nats-server %s is too old:\n%s", code, v, log)
		}
	})
	t.Run("rabbitmq", func(t *testing.T) {
		t.Parallel()
		rabbitURL := rabbittest.Start(t) // skips without RabbitMQ
		exchange := rabbittest.Name("walpost.test.idledelayed")
		t.Cleanup(func() { rabbittest.DeleteExchange(t, rabbitURL, exchange) })
		ob := scheduledOutbox(t, url)
		cfg := ob.Config(t, fmt.Sprintf("  - {name: r, kind: rabbitmq, url: %q, exchange: %q, exchange_type: x-delayed-message, declare_exchange: true, timeout: 5s}",
			rabbitURL, exchange), scheduleColumns)
		cdcInit(t, cfg)
		p := startCDC(t, "run", "--config", cfg)
		code := p.Wait(30 * time.Second)
		log := p.Stderr.String()
		if code != 1 || !strings.Contains(log, "rabbitmq_delayed_message_exchange") || strings.Contains(log, "streaming") {
			p.Cmd.Process.Kill()
			t.Fatalf("exit %d (-1: still running), want 1 at start, before streaming, saying the delayed-message plugin is missing:\n%s", code, log)
		}
	})
}
