package kafka

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish/sinktest"
	"github.com/walpost/walpost/internal/publish/tlsconf/tlstest"
)

// eventHubsConnectionString is shaped like an Event Hubs namespace's; its
// SharedAccessKey must never be printed.
const (
	eventHubsKey              = "c2VjcmV0LWtleS1vZi10aGUtbmFtZXNwYWNlAA=="
	eventHubsConnectionString = "Endpoint=sb://walpost-test.servicebus.windows.net/;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=" + eventHubsKey
)

// TestIntegrationEventHubsConnectionStringAuthenticates: Azure Event
// Hubs' Kafka endpoint takes SASL PLAIN with the username
// "$ConnectionString" and the namespace's connection string as the
// password, over TLS (port 9093). Against a TLS broker that checks exactly
// that, the sink publishes; with a wrong key the error is Permanent and
// names sasl.password; neither the logs nor the error hold the key.
func TestIntegrationEventHubsConnectionStringAuthenticates(t *testing.T) {
	pki := tlstest.NewPKI(t)
	fk := startKafka(t, kfake.SeedTopics(1, "orders"), kfake.EnableSASL(), kfake.Superuser("PLAIN", "$ConnectionString", eventHubsConnectionString),
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{pki.Server}, MinVersion: tls.VersionTLS12}))
	var logs bytes.Buffer
	open := func(password string) *Sink {
		doc := "name: events\nkind: kafka\nbrokers: [" + strings.Join(fk.addrs, ", ") + "]\ntopic: orders\ntimeout: 5s\n" +
			"tls: {enabled: true, ca_file: " + pki.CAFile + "}\n" +
			"sasl: {mechanism: PLAIN, username: $ConnectionString, password: \"" + password + "\"}\n"
		s, err := New(sinktest.SinkConfig(t, doc), zerolog.New(&logs))
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		return s.(*Sink)
	}
	g := sinktest.NewGen(70)
	if err := open(eventHubsConnectionString).Publish(sinktest.Context(t, 10*time.Second), []*message.Message{g.Message("k")}); err != nil {
		t.Fatalf("with the connection string: %v", err)
	}

	// A wrong key: Event Hubs answers SASL_AUTHENTICATION_FAILED (kfake
	// would only close the connection).
	fk.ControlKey(int16(kmsg.SASLAuthenticate), func(req kmsg.Request) (kmsg.Response, error, bool) {
		fk.KeepControl()
		r := req.(*kmsg.SASLAuthenticateRequest)
		if bytes.Contains(r.SASLAuthBytes, []byte(eventHubsKey)) {
			return nil, nil, false
		}
		resp := r.ResponseKind().(*kmsg.SASLAuthenticateResponse)
		resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
		return resp, nil, true
	})
	m := g.Message("k")
	wrong := strings.Replace(eventHubsConnectionString, "AccessKey=c2Vj", "AccessKey=d3Jv", 1)
	err := open(wrong).Publish(sinktest.Context(t, 10*time.Second), []*message.Message{m})
	sinktest.RequirePermanent(t, err, m.ID, "sasl.password")
	for _, key := range []string{eventHubsKey, "d3Jv"} {
		if strings.Contains(err.Error(), key) || strings.Contains(logs.String(), key) {
			t.Errorf("the shared access key is printed:\nerror: %v\nlogs: %s", err, logs.String())
		}
	}
}

// saslServer answers SASLHandshake and SASLAuthenticate for one
// mechanism on a kfake without SASL of its own (kfake knows PLAIN and
// SCRAM only), checking the client's first message with ok and answering
// success with answer.
func saslServer(fk *fakeKafka, mechanism string, answer []byte, ok func(auth []byte) bool) (authenticated *atomic.Int32) {
	authenticated = new(atomic.Int32)
	fk.Control(func(req kmsg.Request) (kmsg.Response, error, bool) {
		fk.KeepControl()
		switch r := req.(type) {
		case *kmsg.SASLHandshakeRequest:
			resp := r.ResponseKind().(*kmsg.SASLHandshakeResponse)
			resp.SupportedMechanisms = []string{mechanism}
			if r.Mechanism != mechanism {
				resp.ErrorCode = kerr.UnsupportedSaslMechanism.Code
			}
			return resp, nil, true
		case *kmsg.SASLAuthenticateRequest:
			resp := r.ResponseKind().(*kmsg.SASLAuthenticateResponse)
			if !ok(r.SASLAuthBytes) {
				resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
				return resp, nil, true
			}
			authenticated.Add(1)
			resp.SASLAuthBytes = answer
			resp.SessionLifetimeMillis = int64(time.Hour / time.Millisecond)
			return resp, nil, true
		}
		return nil, nil, false
	})
	return authenticated
}

// TestIntegrationOAuthBearerSendsTheToken: OAUTHBEARER sends the token
// as RFC 7628's initial client response, from sasl.token or from
// sasl.token_file (read at each authentication); a token the broker
// refuses is a Permanent error.
func TestIntegrationOAuthBearerSendsTheToken(t *testing.T) {
	fk := startKafka(t, kfake.SeedTopics(1, "oauth"))
	const good = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ3YWxwb3N0In0.c2ln"
	authenticated := saslServer(fk, "OAUTHBEARER", nil, func(b []byte) bool {
		return bytes.Equal(b, []byte("n,,\x01auth=Bearer "+good+"\x01\x01"))
	})
	g := sinktest.NewGen(71)
	s := newSink(t, fk.addrs, "oauth", "sasl: {mechanism: OAUTHBEARER, token: "+good+"}")
	if err := s.Publish(sinktest.Context(t, 10*time.Second), []*message.Message{g.Message("k")}); err != nil {
		t.Fatalf("with sasl.token: %v", err)
	}
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(good+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s = newSink(t, fk.addrs, "oauth", "sasl: {mechanism: OAUTHBEARER, token_file: "+file+"}")
	if err := s.Publish(sinktest.Context(t, 10*time.Second), []*message.Message{g.Message("k")}); err != nil {
		t.Fatalf("with sasl.token_file: %v", err)
	}
	if authenticated.Load() == 0 {
		t.Fatal("no SASL authentication took place")
	}
	m := g.Message("k")
	s = newSink(t, fk.addrs, "oauth", "sasl: {mechanism: OAUTHBEARER, token: expired}")
	sinktest.RequirePermanent(t, s.Publish(sinktest.Context(t, 10*time.Second), []*message.Message{m}), m.ID, "sasl")
}

// TestIntegrationMSKIAMSignsWithTheCredentials: AWS_MSK_IAM sends a
// SigV4-signed kafka-cluster:Connect request for the broker's host, with
// the configured access key, or with the environment's when none is
// configured (read at each authentication).
func TestIntegrationMSKIAMSignsWithTheCredentials(t *testing.T) {
	t.Setenv("AWS_REGION", "eu-west-1") // a 127.0.0.1 broker names no region
	pki := tlstest.NewPKI(t)
	fk := startKafka(t, kfake.SeedTopics(1, "msk"), kfake.TLS(&tls.Config{Certificates: []tls.Certificate{pki.Server}, MinVersion: tls.VersionTLS12}))
	var lastKey atomic.Value
	saslServer(fk, "AWS_MSK_IAM", []byte(`{"version":"2020_10_22","request-id":"walpost-test"}`), func(b []byte) bool {
		var req map[string]string
		if err := json.Unmarshal(b, &req); err != nil {
			return false
		}
		cred := req["x-amz-credential"]
		lastKey.Store(strings.SplitN(cred, "/", 2)[0])
		return req["action"] == "kafka-cluster:Connect" && strings.Contains(cred, "/eu-west-1/kafka-cluster/aws4_request") &&
			req["x-amz-signature"] != "" && req["host"] == "127.0.0.1"
	})
	g := sinktest.NewGen(72)
	tlsKeys := "tls: {enabled: true, ca_file: " + pki.CAFile + "}"
	s := newSink(t, fk.addrs, "msk", tlsKeys, "sasl: {mechanism: AWS_MSK_IAM, access_key_id: AKIACONFIGURED, secret_access_key: s3cret}")
	if err := s.Publish(sinktest.Context(t, 10*time.Second), []*message.Message{g.Message("k")}); err != nil {
		t.Fatalf("with configured keys: %v", err)
	}
	if k, _ := lastKey.Load().(string); k != "AKIACONFIGURED" {
		t.Errorf("signed with access key %q, want the configured one", k)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIAFROMENV")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "s3cret-env")
	s = newSink(t, fk.addrs, "msk", tlsKeys, "sasl: {mechanism: AWS_MSK_IAM}")
	if err := s.Publish(sinktest.Context(t, 10*time.Second), []*message.Message{g.Message("k")}); err != nil {
		t.Fatalf("with the environment's keys: %v", err)
	}
	if k, _ := lastKey.Load().(string); k != "AKIAFROMENV" {
		t.Errorf("signed with access key %q, want the environment's", k)
	}
}
