package rabbitmq

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/sinktest"
)

// TestExchangeFromARowIsNotAnAmqExchange: a type or key may not choose an
// exchange in the amq. namespace (amq.rabbitmq.trace, amq.topic, …), nor
// a character outside [a-zA-Z0-9-_.:]; a fixed amq. exchange, or a
// template whose own leading text is amq., is the operator's choice.
func TestExchangeFromARowIsNotAnAmqExchange(t *testing.T) {
	for _, c := range []struct {
		tmpl, typ string
		ok        bool
	}{
		{"{type}", "amq.rabbitmq.trace", false},
		{"{type}", "amq.direct", false},
		{"{type}", "amq.topic", false},
		{"am{type}", "q.headers", false},
		{"{type}", "a/b", false},
		{"{type}", "a b", false},
		{"{type}", "$x", false},
		{"{type}", "", false},
		{"{type}", "orders", true},
		{"{type}", "amq", true},
		{"outbox.{type}", "amq.rabbitmq.trace", true}, // "outbox.amq.rabbitmq.trace"
		{"amq.topic", "x", true},
		{"amq.{type}", "topic", true},
	} {
		tmpl, err := parseExchange(c.tmpl)
		if err != nil {
			t.Fatalf("%s: %v", c.tmpl, err)
		}
		name, err := tmpl.Expand(&message.Message{ID: "id", Type: c.typ})
		if c.ok != (err == nil) || err != nil && !errors.Is(err, errIllegalExchange) {
			t.Errorf("template %q, type %q: exchange %q, error %v; want accepted %v", c.tmpl, c.typ, name, err, c.ok)
		}
	}
}

// TestDeclareExchangesDecidesWhatATemplateMayDeclare: with declare_exchange
// a templated exchange is declared only when declare_exchanges allows it:
// by default the names under the template's leading text, none for a
// template that starts with a placeholder; a list names exchanges, and
// prefixes with a trailing '*'. A fixed exchange is always declared.
func TestDeclareExchangesDecidesWhatATemplateMayDeclare(t *testing.T) {
	for _, c := range []struct {
		tmpl  string
		list  []string
		name  string
		allow bool
	}{
		{"{type}", nil, "orders", false},
		{"{type}", nil, "x", false},
		{"outbox.{type}", nil, "outbox.orders", true},
		{"outbox.{type}", nil, "outbox", false},
		{"{type}", []string{"orders", "billing.*"}, "orders", true},
		{"{type}", []string{"orders", "billing.*"}, "orders2", false},
		{"{type}", []string{"orders", "billing.*"}, "billing.paid", true},
		{"{type}", []string{"orders", "billing.*"}, "billing", false},
		{"{type}", []string{}, "orders", false},
	} {
		tmpl, err := parseExchange(c.tmpl)
		if err != nil {
			t.Fatal(err)
		}
		s := &Sink{exchange: tmpl, declarable: declarable(c.list, tmpl)}
		if got := s.mayDeclare(c.name); got != c.allow {
			t.Errorf("template %q, declare_exchanges %q: may declare %q = %v, want %v", c.tmpl, c.list, c.name, got, c.allow)
		}
	}
	fixed, _ := parseExchange("events")
	if s := (&Sink{exchange: fixed, declarable: declarable(nil, fixed)}); !s.mayDeclare("events") {
		t.Error("a fixed exchange is not declared")
	}
}

// TestDeclareExchangesIsChecked: declare_exchanges needs declare_exchange
// and a template, and holds exchange names or prefixes ending in '*',
// never "*" alone nor the amq. namespace.
func TestDeclareExchangesIsChecked(t *testing.T) {
	const tmpl = "url: amqp://h/\nexchange: \"{type}\"\n"
	for _, c := range []struct{ body, want string }{
		{tmpl + "declare_exchanges: [a]\n", "declare_exchanges: set, but declare_exchange is false"},
		{tmpl + "declare_exchange: true\ndeclare_exchanges: [\"*\"]\n", "declare_exchanges[0]: \"*\" would let any message's type create any exchange"},
		{tmpl + "declare_exchange: true\ndeclare_exchanges: [a, \"\"]\n", "declare_exchanges[1]: empty"},
		{tmpl + "declare_exchange: true\ndeclare_exchanges: [\"a*b\"]\n", "'*' only at the end"},
		{tmpl + "declare_exchange: true\ndeclare_exchanges: [\"amq.x*\"]\n", "declare_exchanges[0]: \"amq.x*\": RabbitMQ keeps the amq. namespace"},
		{tmpl + "declare_exchange: true\ndeclare_exchanges: [\"a/b\"]\n", "illegal exchange name"},
		{"url: amqp://h/\nexchange: fixed\ndeclare_exchange: true\ndeclare_exchanges: [a]\n", "exchange \"fixed\" is a fixed name"},
	} {
		doc := "name: events\nkind: rabbitmq\n" + c.body
		_, err := publish.Prepare(0, sinktest.SinkConfig(t, doc), zerolog.Nop())
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: err = %v, want one containing %q", c.body, err, c.want)
		}
	}
	doc := "name: events\nkind: rabbitmq\n" + tmpl + "declare_exchange: true\ndeclare_exchanges: [orders, \"billing.*\"]\n"
	if _, err := publish.Prepare(0, sinktest.SinkConfig(t, doc), zerolog.Nop()); err != nil {
		t.Errorf("a good declare_exchanges: %v", err)
	}
}

// TestDeclareWithAnOpenTemplateWarns: declare_exchange with an exchange
// template that starts with a placeholder and no declare_exchanges
// declares nothing a message names, and the sink says so when configured.
func TestDeclareWithAnOpenTemplateWarns(t *testing.T) {
	for _, c := range []struct {
		extra string
		warn  bool
	}{{"", true}, {"declare_exchanges: [orders]\n", false}} {
		var buf bytes.Buffer
		doc := "name: events\nkind: rabbitmq\nurl: amqp://h/\nexchange: \"{type}\"\ndeclare_exchange: true\n" + c.extra
		s, err := New(sinktest.SinkConfig(t, doc), zerolog.New(&buf))
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		if got := strings.Contains(buf.String(), "list the exchanges it may declare in declare_exchanges"); got != c.warn {
			t.Errorf("%q: warned %v, want %v\n%s", c.extra, got, c.warn, buf.String())
		}
	}
}
