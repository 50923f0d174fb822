package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
)

// Failure is a kind of TLS failure that retrying does not fix: the
// settings (or the server's) must change. Hint words it for the operator.
type Failure int

const (
	// None: err is not one of the failures below; the sink decides.
	None Failure = iota
	// Unverified: the client cannot verify the server's certificate (an
	// unknown authority, another host name, an expired or otherwise
	// invalid certificate): check tls.ca_file and tls.server_name.
	Unverified
	// Refused: the server ended the handshake with an alert (it refused
	// the client certificate or got none, or shares no protocol version):
	// check tls.cert_file and tls.key_file.
	Refused
	// NotTLS: the server answered in something other than TLS (a plain
	// listener on the port).
	NotTLS
)

// Classify tells which Failure err (or an error it wraps) is. It looks
// only at error types and fields, never at the text.
func Classify(err error) Failure {
	var (
		verify   *tls.CertificateVerificationError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		alert    tls.AlertError
		header   tls.RecordHeaderError
	)
	switch {
	case errors.As(err, &verify), errors.As(err, &unknown), errors.As(err, &hostname), errors.As(err, &invalid):
		return Unverified
	case errors.As(err, &alert), isRemoteAlert(err):
		return Refused
	case errors.As(err, &header):
		return NotTLS
	}
	return None
}

// isRemoteAlert reports whether err is an alert the peer sent during the
// handshake. crypto/tls reports those on TCP as a *net.OpError whose Op
// is "remote error" (its alert type is unexported); the Op field is the
// kind of the failure, not its text.
func isRemoteAlert(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "remote error"
}

// Hint words what to do about f for the operator, naming the peer by noun
// ("server", "broker"): for Unverified "the server's certificate does not
// verify: check tls.ca_file and tls.server_name", for Refused "the server
// refused the TLS handshake: check tls.cert_file and tls.key_file", for
// NotTLS "the server does not speak TLS on this port", to which the sink
// adds its own remedy (": use amqp:// or …"); "" for None.
func Hint(f Failure, noun string) string {
	switch f {
	case Unverified:
		return "the " + noun + "'s certificate does not verify: check tls.ca_file and tls.server_name"
	case Refused:
		return "the " + noun + " refused the TLS handshake: check tls.cert_file and tls.key_file"
	case NotTLS:
		return "the " + noun + " does not speak TLS on this port"
	}
	return ""
}
