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
