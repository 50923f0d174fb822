package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"testing"
)

// TestClassifyDecidesByErrorKindNotText: each failure kind is told by its
// type, also wrapped; other errors, whatever they say, are None.
func TestClassifyDecidesByErrorKindNotText(t *testing.T) {
	for _, c := range []struct {
		err  error
		want Failure
	}{
		{&tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}, Unverified},
		{fmt.Errorf("dial: %w", x509.HostnameError{}), Unverified},
		{x509.CertificateInvalidError{Reason: x509.Expired}, Unverified},
		{fmt.Errorf("remote error: %w", tls.AlertError(42)), Refused},
		{&net.OpError{Op: "remote error", Err: errors.New("tls: certificate required")}, Refused},
		{tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}, NotTLS},
		{&net.OpError{Op: "dial", Err: errors.New("remote error: tls: bad certificate")}, None},
		{errors.New("x509: certificate signed by unknown authority"), None},
		{nil, None},
	} {
		if got := Classify(c.err); got != c.want {
			t.Errorf("Classify(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}

// TestHintWordsEachFailure: Hint gives the sinks' sentences, naming the
// peer, and nothing for None.
func TestHintWordsEachFailure(t *testing.T) {
	for _, c := range []struct {
		f    Failure
		noun string
		want string
	}{
		{Unverified, "broker", "the broker's certificate does not verify: check tls.ca_file and tls.server_name"},
		{Refused, "server", "the server refused the TLS handshake: check tls.cert_file and tls.key_file"},
		{NotTLS, "server", "the server does not speak TLS on this port"},
		{None, "server", ""},
	} {
		if got := Hint(c.f, c.noun); got != c.want {
			t.Errorf("Hint(%d, %q) = %q, want %q", c.f, c.noun, got, c.want)
		}
	}
}
