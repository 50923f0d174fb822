package kafka

import (
	"crypto/tls"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish/sinktest"
	"github.com/walpost/walpost/internal/publish/tlsconf/tlstest"
)

// TestIntegrationTLS: with the CA (and a client certificate where the
// broker requires one) the sink publishes; a certificate it cannot verify,
// and a client certificate the broker requires but does not get are
// Permanent errors that say what to check.
func TestIntegrationTLS(t *testing.T) {
	pki := tlstest.NewPKI(t)
	fk := startKafka(t, kfake.SeedTopics(1, "secure"), kfake.TLS(&tls.Config{
		Certificates: []tls.Certificate{pki.Server},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pki.Pool,
		MinVersion:   tls.VersionTLS12,
	}))
	g := sinktest.NewGen(50)
	publishOne := func(s *Sink) (*message.Message, error) {
		m := g.Message("k")
		return m, s.Publish(sinktest.Context(t, 10*time.Second), []*message.Message{m})
	}

	ok := newSink(t, fk.addrs, "secure", "tls: {enabled: true, ca_file: "+pki.CAFile+", cert_file: "+pki.ClientCert+", key_file: "+pki.ClientKey+"}")
	if _, err := publishOne(ok); err != nil {
		t.Fatalf("with CA and client certificate: %v", err)
	}

	unknownCA := newSink(t, fk.addrs, "secure", "tls: {enabled: true, cert_file: "+pki.ClientCert+", key_file: "+pki.ClientKey+"}")
	m, err := publishOne(unknownCA)
	sinktest.RequirePermanent(t, err, m.ID, "tls.ca_file")

	noClientCert := newSink(t, fk.addrs, "secure", "tls: {enabled: true, ca_file: "+pki.CAFile+"}")
	m, err = publishOne(noClientCert)
	sinktest.RequirePermanent(t, err, m.ID, "tls.cert_file")

	// A TLS client facing a plaintext Kafka listener is not tested here: the
	// broker reads the ClientHello as the start of a request and waits, so
	// the client sees a timeout (transient), as it would against Kafka,
	// which closes such a connection. tls.RecordHeaderError, the case of a
	// listener that answers in plain text, is classified in
	// TestClassifyDecidesByErrorKindNotText.
}
