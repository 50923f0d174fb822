package rabbitmq

import (
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/rabbitmq/rabbittest"
	"github.com/walpost/walpost/internal/publish/sinktest"
)

// TestIntegrationBrokerRefusingATemplatedExchangeRefusesTheMessage: when
// RabbitMQ refuses an exchange a message's type chose — 406 for one of
// another type than exchange_type, 404 for one that does not exist and
// that declare_exchanges does not allow declaring — the error is
// Rejected (relay.on_refused decides: stop, or park and go on), never a
// Permanent stop that no policy gets past; and the sink goes on with the
// next message on a new channel.
func TestIntegrationBrokerRefusingATemplatedExchangeRefusesTheMessage(t *testing.T) {
	url := rabbittest.Start(t)
	good := rabbittest.Declare(t, url, rabbittest.Topology{})
	fanout := rabbittest.Declare(t, url, rabbittest.Topology{Kind: amqp.ExchangeFanout})
	missing := rabbittest.Name("walpost.test.missing")
	t.Cleanup(func() { rabbittest.DeleteExchange(t, url, missing) })
	s := newSink(t, url, "{type}", "declare_exchange: true", "exchange_type: topic",
		"declare_exchanges: ["+fanout.Exchange+"]") // good exists: checked, not declared
	g := sinktest.NewGen(3)
	for _, c := range []struct{ exchange, want string }{
		{fanout.Exchange, "406"},
		{missing, "declare_exchanges does not allow declaring it"},
	} {
		m := g.Message("k")
		m.Type = c.exchange
		err := s.Publish(sinktest.Context(t, 30*time.Second), []*message.Message{m})
		if !publish.IsRejected(err) || !strings.Contains(err.Error(), m.ID) || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("exchange %s: Publish = %v, want Rejected naming %s and saying %q", c.exchange, err, m.ID, c.want)
		}
		ok := g.Message("k")
		ok.Type = good.Exchange
		if err := s.Publish(sinktest.Context(t, 30*time.Second), []*message.Message{ok}); err != nil {
			t.Fatalf("the next message, to %s: %v", good.Exchange, err)
		}
	}
	if rabbittest.ExchangeExists(t, url, missing) {
		t.Fatalf("the sink declared %s, which declare_exchanges does not list", missing)
	}
	if n := len(rabbittest.Await(t, url, good.Queue, 2, 10*time.Second)); n != 2 {
		t.Fatalf("the good exchange's queue got %d messages, want 2", n)
	}
}
