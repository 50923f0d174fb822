package kafka

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish/sinktest"
)

// testPKI is a throwaway CA with a server certificate for 127.0.0.1 and a
// client certificate, written as PEM files into a temp dir.
type testPKI struct {
	caFile, clientCert, clientKey string
	server                        tls.Certificate
	pool                          *x509.CertPool
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	dir := t.TempDir()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "walpost test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	leaf := func(serial int64, usage x509.ExtKeyUsage, ip bool) (certPEM, keyPEM []byte) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "walpost"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		}
		if ip {
			tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kb, _ := x509.MarshalECPrivateKey(key)
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
	}
	p := &testPKI{
		caFile:     filepath.Join(dir, "ca.pem"),
		clientCert: filepath.Join(dir, "client.pem"),
		clientKey:  filepath.Join(dir, "client-key.pem"),
		pool:       x509.NewCertPool(),
	}
	p.pool.AddCert(ca)
	write := func(path string, b []byte) {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(p.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}))
	cc, ck := leaf(3, x509.ExtKeyUsageClientAuth, false)
	write(p.clientCert, cc)
	write(p.clientKey, ck)
	sc, sk := leaf(2, x509.ExtKeyUsageServerAuth, true)
	if p.server, err = tls.X509KeyPair(sc, sk); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestIntegrationTLS: with the CA (and a client certificate where the
// broker requires one) the sink publishes; a certificate it cannot verify,
// and a client certificate the broker requires but does not get are
// Permanent errors that say what to check.
func TestIntegrationTLS(t *testing.T) {
	pki := newTestPKI(t)
	fk := startKafka(t, kfake.SeedTopics(1, "secure"), kfake.TLS(&tls.Config{
		Certificates: []tls.Certificate{pki.server},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pki.pool,
		MinVersion:   tls.VersionTLS12,
	}))
	g := sinktest.NewGen(50)
	publishOne := func(s *Sink) (*message.Message, error) {
		m := g.Message("k")
		return m, s.Publish(ctxFor(t, 10*time.Second), []*message.Message{m})
	}

	ok := newSink(t, fk.addrs, "secure", "tls: {enabled: true, ca_file: "+pki.caFile+", cert_file: "+pki.clientCert+", key_file: "+pki.clientKey+"}")
	if _, err := publishOne(ok); err != nil {
		t.Fatalf("with CA and client certificate: %v", err)
	}

	unknownCA := newSink(t, fk.addrs, "secure", "tls: {enabled: true, cert_file: "+pki.clientCert+", key_file: "+pki.clientKey+"}")
	m, err := publishOne(unknownCA)
	requirePermanent(t, err, m.ID, "tls.ca_file")

	noClientCert := newSink(t, fk.addrs, "secure", "tls: {enabled: true, ca_file: "+pki.caFile+"}")
	m, err = publishOne(noClientCert)
	requirePermanent(t, err, m.ID, "tls.cert_file")

	// A TLS client facing a plaintext Kafka listener is not tested here: the
	// broker reads the ClientHello as the start of a request and waits, so
	// the client sees a timeout (transient), as it would against Kafka,
	// which closes such a connection. tls.RecordHeaderError, the case of a
	// listener that answers in plain text, is classified in
	// TestClassifyDecidesByErrorKindNotText.
}
