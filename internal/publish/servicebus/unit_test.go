package servicebus

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/go-amqp"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/sinktest"
)

const testCS = "Endpoint=sb://walpost.servicebus.windows.net/;SharedAccessKeyName=send;SharedAccessKey=s3cretKEY="

func openConfig(t *testing.T, body string) (publish.Sink, error) {
	t.Helper()
	return New(sinktest.SinkConfig(t, "name: bus\nkind: servicebus\n"+body), zerolog.Nop())
}

func TestRegistersKind(t *testing.T) {
	if !slices.Contains(publish.Kinds(), "servicebus") {
		t.Fatalf("kinds %v lack servicebus", publish.Kinds())
	}
}

// TestConfigErrorsNameTheField: every invalid setting is refused with an
// error that starts with the field, and never repeats the connection
// string's key.
func TestConfigErrorsNameTheField(t *testing.T) {
	cs := fmt.Sprintf("connection_string: %q\n", testCS)
	for _, c := range []struct{ body, want string }{
		{"queue: q\n", "connection_string, namespace: neither is set"},
		{cs + "namespace: walpost.servicebus.windows.net\nqueue: q\n", "connection_string, namespace: both are set"},
		{"connection_string: \"Endpoint=sb://x.servicebus.windows.net/;SharedAccessKey=s3cretKEY=\"\nqueue: q\n", "connection_string: needs SharedAccessKeyName"},
		{"connection_string: \"Endpoint=https://x/;SharedAccessKeyName=a;SharedAccessKey=s3cretKEY=\"\nqueue: q\n", "connection_string: Endpoint"},
		{"connection_string: \"just s3cretKEY=\"\nqueue: q\n", "connection_string: no Endpoint"},
		{"connection_string: \"s3cretKEY\"\nqueue: q\n", "connection_string: not a list of key=value"},
		{"namespace: sb://walpost.servicebus.windows.net\nqueue: q\n", "namespace: \"sb://walpost.servicebus.windows.net\" has a scheme"},
		{"namespace: walpost\nqueue: q\n", "namespace: \"walpost\" is not fully qualified"},
		{cs, "queue, topic, entity: none is set"},
		{cs + "queue: q\ntopic: t\n", "queue, topic, entity: more than one is set"},
		{cs + "queue: \"orders/\"\n", "queue: \"orders/\": servicebus: illegal entity name: it must start and end"},
		{cs + "topic: \"a b\"\n", "topic: \"a b\": servicebus: illegal entity name: character ' '"},
		{cs + "entity: \"outbox.{tpye}\"\n", "entity: \"outbox.{tpye}\" has the unknown placeholder {tpye}"},
		{cs + "entity: \"outbox {type}\"\n", "entity: template \"outbox {type}\""},
		{cs + "entity: \"outbox.{type\"\n", "entity: \"outbox.{type\" has a '{' without '}'"},
		{cs + "queue: q\nmax_retries: 21\n", "max_retries: 21 is outside 0..20"},
		{cs + "queue: q\nretry_delay: 2m\n", "retry_delay: 2m0s is outside"},
		{cs + "queue: q\nretry_delay: 5s\nmax_retry_delay: 1s\n", "max_retry_delay: 1s is below retry_delay 5s"},
		{cs + "queue: q\nmax_batch_bytes: 100\n", "max_batch_bytes: 100 is outside"},
		{cs + "queue: q\ntimeout: 10ms\n", "timeout: 10ms is outside"},
		{cs + "queue: q\nqeueu: x\n", "qeueu"},
		{cs + "queue: q\nformat: json\n", `format: unknown "json" (raw or cloudevents)`},
		{cs + "queue: q\nsource: /orders\n", "source: only used with format: cloudevents"},
		{cs + "queue: q\nformat: cloudevents\nsource: \"%zz\"\n", `source: "%zz" is not a URI reference`},
	} {
		_, err := openConfig(t, c.body)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("config\n%s\ngave %v, want an error containing %q", c.body, err, c.want)
			continue
		}
		if strings.Contains(err.Error(), "s3cretKEY") {
			t.Errorf("error %q repeats the connection string's secret", err)
		}
	}
}

func TestConfigDefaultsAndRetryOptions(t *testing.T) {
	var c sbConfig
	c.ConnectionString, c.Queue = testCS, "q"
	c.SetDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	ro := c.retryOptions()
	if ro.MaxRetries != 3 || ro.RetryDelay != 500*time.Millisecond || ro.MaxRetryDelay != 10*time.Second || c.Timeout.D() != time.Minute {
		t.Errorf("defaults %+v, timeout %s", ro, c.Timeout.D())
	}
	zero := 0
	c.MaxRetries = &zero
	if ro := c.retryOptions(); ro.MaxRetries >= 0 {
		t.Errorf("max_retries 0 maps to %d; the SDK reads 0 as its default of 3", ro.MaxRetries)
	}
}

// TestNeitherLogsNorErrorsRepeatTheSecret: the configured log line names
// the endpoint, not the key.
func TestNeitherLogsNorErrorsRepeatTheSecret(t *testing.T) {
	var buf bytes.Buffer
	s, err := New(sinktest.SinkConfig(t, fmt.Sprintf("name: bus\nkind: servicebus\nconnection_string: %q\nqueue: q\n", testCS)), zerolog.New(&buf))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if strings.Contains(buf.String(), "s3cretKEY") || !strings.Contains(buf.String(), "walpost.servicebus.windows.net") {
		t.Errorf("log %q: want the endpoint and not the key", buf.String())
	}
}

// TestNamespaceUsesAzureADWithoutConnecting: a namespace sink is made
// without touching the network (DefaultAzureCredential is lazy).
func TestNamespaceUsesAzureADWithoutConnecting(t *testing.T) {
	s, err := openConfig(t, "namespace: walpost.servicebus.windows.net\ntopic: events\nsessions: true\n")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestEntityTemplateExpandsAndChecksNames(t *testing.T) {
	tmpl, err := parseEntity("entity", "walpost.{type}.{key}")
	if err != nil {
		t.Fatal(err)
	}
	m := &message.Message{ID: "0190b6a4-7a4c-7cc2-9f1e-6f1d3c1f7a10", Type: "order.created", Key: "k-1", HasKey: true}
	if name, err := tmpl.Expand(m); err != nil || name != "walpost.order.created.k-1" {
		t.Errorf("expand: %q, %v", name, err)
	}
	m.HasKey = false
	if name, _ := tmpl.Expand(m); name != "walpost.order.created."+m.ID {
		t.Errorf("a NULL key expands to %q, want the id", name)
	}
	m.Type = "order created"
	if _, err := tmpl.Expand(m); !errors.Is(err, errIllegalEntity) {
		t.Errorf("a type with a space gave %v, want errIllegalEntity", err)
	}
	for name, ok := range map[string]bool{
		"orders": true, "a/b.c-d_e": true, "x": true, strings.Repeat("a", 260): true,
		"": false, "/a": false, "a/": false, "a//b": false, "-a": false, "a$": false, strings.Repeat("a", 261): false,
	} {
		if err := entityRules.Check(name); (err == nil) != ok {
			t.Errorf("entityRules.Check(%q) = %v, want ok %v", name, err, ok)
		}
	}
}

// TestMappingForDotNetReceivers checks the Service Bus message built from
// an outbox message field by field.
func TestMappingForDotNetReceivers(t *testing.T) {
	g := sinktest.NewGen(61)
	m := g.Message("order-7")
	m.Headers["correlation-id"] = "dash"
	m.Headers["correlation_id"] = "underscore"
	sm := toMessage(m, true, nil)
	switch {
	case *sm.MessageID != m.ID, *sm.Subject != m.Type, *sm.ContentType != ContentTypeJSON, !bytes.Equal(sm.Body, m.Payload):
		t.Errorf("id, subject, content type or body wrong: %+v", sm)
	case *sm.SessionID != "order-7":
		t.Errorf("SessionID %q, want the key", *sm.SessionID)
	case *sm.CorrelationID != "underscore":
		t.Errorf("CorrelationID %q, want correlation_id's value", *sm.CorrelationID)
	case sm.ApplicationProperties[PropertyDiagnosticID] != m.Headers[HeaderTraceparent],
		sm.ApplicationProperties[HeaderTraceparent] != m.Headers[HeaderTraceparent],
		sm.ApplicationProperties["correlation-id"] != "dash":
		t.Errorf("ApplicationProperties %v", sm.ApplicationProperties)
	case sm.PartitionKey != nil || sm.TimeToLive != nil || sm.ScheduledEnqueueTime != nil:
		t.Errorf("partition key, TTL or schedule set: %+v", sm)
	}

	n := g.NullKeyMessage()
	n.Payload, n.PayloadJSON, n.Headers = nil, false, nil
	sm = toMessage(n, false, nil)
	if sm.SessionID != nil || sm.CorrelationID != nil || sm.ApplicationProperties != nil || *sm.ContentType != ContentTypeBinary || sm.Body == nil {
		t.Errorf("bare message mapped to %+v", sm)
	}
	if sm = toMessage(n, true, nil); *sm.SessionID != n.ID {
		t.Errorf("NULL key with sessions: SessionID %q, want the id", *sm.SessionID)
	}
	n.Headers = map[string]string{HeaderTraceparent: "tp", PropertyDiagnosticID: "mine", "correlation_id": ""}
	if sm = toMessage(n, false, nil); sm.ApplicationProperties[PropertyDiagnosticID] != "mine" || sm.CorrelationID != nil {
		t.Errorf("a Diagnostic-Id of the headers column must win and an empty correlation id be skipped: %+v", sm)
	}
}

// TestSessionIDOverServiceBusLimitIsPermanent: a key over 128 characters
// cannot be a session id; the call fails before connecting.
func TestSessionIDOverServiceBusLimitIsPermanent(t *testing.T) {
	s, err := openConfig(t, "connection_string: \"Endpoint=sb://127.0.0.1:1;SharedAccessKeyName=a;SharedAccessKey=b;UseDevelopmentEmulator=true\"\nqueue: q\nsessions: true\n")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m := sinktest.NewGen(62).Message(strings.Repeat("k", 129))
	err = s.Publish(context.Background(), []*message.Message{m})
	if !publish.IsPermanent(err) || !strings.Contains(err.Error(), m.ID) || !strings.Contains(err.Error(), "session id") {
		t.Fatalf("got %v, want a Permanent error naming the message and the session id limit", err)
	}
}

func TestClassifyByTypeAndCode(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("sending: %w", err) }
	for _, c := range []struct {
		name      string
		err       error
		permanent bool
	}{
		{"ErrMessageTooLarge", wrap(azservicebus.ErrMessageTooLarge), true},
		{"message-size-exceeded", wrap(&amqp.Error{Condition: amqp.ErrCondMessageSizeExceeded}), true},
		{"not-found on attach", wrap(&amqp.Error{Condition: amqp.ErrCondNotFound}), true},
		{"not-found in a link error", wrap(&amqp.LinkError{RemoteErr: &amqp.Error{Condition: amqp.ErrCondNotFound}}), true},
		{"CodeNotFound", wrap(&azservicebus.Error{Code: azservicebus.CodeNotFound}), true},
		{"CodeUnauthorizedAccess", wrap(&azservicebus.Error{Code: azservicebus.CodeUnauthorizedAccess}), true},
		{"unauthorized-access", &amqp.Error{Condition: amqp.ErrCondUnauthorizedAccess}, true},
		{"entity-disabled", &amqp.Error{Condition: condEntityDisabled}, true},
		{"not-allowed", &amqp.Error{Condition: amqp.ErrCondNotAllowed}, true},
		{"AAD says 401", &azidentity.AuthenticationFailedError{RawResponse: &http.Response{StatusCode: 401}}, true},
		{"AAD says 429", &azidentity.AuthenticationFailedError{RawResponse: &http.Response{StatusCode: 429}}, false},
		{"AAD says 503", &azidentity.AuthenticationFailedError{RawResponse: &http.Response{StatusCode: 503}}, false},
		{"AuthenticationRequiredError", &azidentity.AuthenticationRequiredError{}, true},
		{"CodeConnectionLost", wrap(&azservicebus.Error{Code: azservicebus.CodeConnectionLost}), false},
		{"CodeTimeout", &azservicebus.Error{Code: azservicebus.CodeTimeout}, false},
		{"CodeClosed", &azservicebus.Error{Code: azservicebus.CodeClosed}, false},
		{"server-busy", &amqp.Error{Condition: condServerBusy}, false},
		{"com.microsoft:timeout", &amqp.Error{Condition: condTimeout}, false},
		{"resource-limit-exceeded", &amqp.Error{Condition: amqp.ErrCondResourceLimitExceeded}, false},
		{"detach-forced", &amqp.LinkError{RemoteErr: &amqp.Error{Condition: amqp.ErrCondDetachForced}}, false},
		{"connection closed", &amqp.ConnError{}, false},
		{"EOF", wrap(io.EOF), false},
		{"refused", wrap(&net.OpError{Op: "dial", Err: errors.New("connection refused")}), false},
		{"canceled", wrap(context.Canceled), false},
		{"deadline", wrap(context.DeadlineExceeded), false},
		{"unknown", errors.New("something else"), false},
	} {
		if v := classify(c.err); v.permanent != c.permanent {
			t.Errorf("%s: permanent = %v, want %v", c.name, v.permanent, c.permanent)
		} else if v.permanent && v.hint == "" {
			t.Errorf("%s: permanent without a hint", c.name)
		}
	}
}

func TestResetOnlyAfterConnectionTrouble(t *testing.T) {
	for _, c := range []struct {
		err   error
		reset bool
	}{
		{&amqp.Error{Condition: condServerBusy}, false},
		{&amqp.Error{Condition: amqp.ErrCondResourceLimitExceeded}, false},
		{&amqp.LinkError{RemoteErr: &amqp.Error{Condition: condServerBusy}}, true},
		{&azservicebus.Error{Code: azservicebus.CodeConnectionLost}, true},
		{io.EOF, true},
		{context.Canceled, true},
		{publish.Permanent(errors.New("too large")), false},
	} {
		if got := needsReset(c.err); got != c.reset {
			t.Errorf("needsReset(%v) = %v, want %v", c.err, got, c.reset)
		}
	}
}
