package kafka

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/aws"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	"github.com/xdg-go/stringprep"
)

// SASL mechanisms (sasl.mechanism, any case).
const (
	mechPlain       = "PLAIN"
	mechSCRAM256    = "SCRAM-SHA-256"
	mechSCRAM512    = "SCRAM-SHA-512"
	mechOAuthBearer = "OAUTHBEARER"
	mechMSKIAM      = "AWS_MSK_IAM"
)

const mechanisms = "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER or AWS_MSK_IAM"

// Environment variables AWS_MSK_IAM reads, at each authentication, when
// sasl.access_key_id is not given (the names of the AWS SDKs).
const (
	envAWSAccessKeyID     = "AWS_ACCESS_KEY_ID"
	envAWSSecretAccessKey = "AWS_SECRET_ACCESS_KEY"
	envAWSSessionToken    = "AWS_SESSION_TOKEN"
)

// saslConfig is the sink's sasl: mapping (docs/sinks/kafka.md, "Options").
// Which keys apply depends on the mechanism; validate refuses the others.
type saslConfig struct {
	// Mechanism is PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER or
	// AWS_MSK_IAM, in any case.
	Mechanism string `yaml:"mechanism"`
	// Username and Password, for PLAIN and SCRAM. Azure Event Hubs' Kafka
	// endpoint takes PLAIN with the username "$ConnectionString" and the
	// namespace's connection string as the password.
	Username string `yaml:"username"`
	Password string `yaml:"password"`
	// Token is an OAUTHBEARER token (a JWT), sent as it is; TokenFile
	// names a file holding one, read again at each authentication, so
	// that whatever renews it (a sidecar, a Kubernetes projected token)
	// can replace it. One of the two, with OAUTHBEARER.
	Token     string `yaml:"token"`
	TokenFile string `yaml:"token_file"`
	// AccessKeyID, SecretAccessKey and SessionToken (optional) sign
	// AWS_MSK_IAM; when AccessKeyID is empty the environment's
	// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN are
	// read at each authentication instead (rotated credentials are
	// picked up on the next connection).
	AccessKeyID     string `yaml:"access_key_id"`
	SecretAccessKey string `yaml:"secret_access_key"`
	SessionToken    string `yaml:"session_token"`
}

// validate checks the mechanism and the keys it needs and takes; tls is
// whether tls.enabled is set. Errors name the field, never a secret.
func (s *saslConfig) validate(tls bool) error {
	set := func(v string) bool { return v != "" }
	only := func(allowed ...string) error {
		for _, f := range []struct{ name, v string }{{"username", s.Username}, {"password", s.Password}, {"token", s.Token},
			{"token_file", s.TokenFile}, {"access_key_id", s.AccessKeyID}, {"secret_access_key", s.SecretAccessKey},
			{"session_token", s.SessionToken}} {
			if set(f.v) && !strings.Contains(" "+strings.Join(allowed, " ")+" ", " "+f.name+" ") {
				return fmt.Errorf("sasl.%s: not used with sasl.mechanism %s", f.name, s.Mechanism)
			}
		}
		return nil
	}
	switch s.Mechanism {
	case mechPlain, mechSCRAM256, mechSCRAM512:
		if err := only("username", "password"); err != nil {
			return err
		}
		if s.Username == "" {
			return errors.New("sasl.username: empty")
		}
		if s.Password == "" {
			return errors.New("sasl.password: empty (use ${VAR} to take it from the environment)")
		}
	case mechOAuthBearer:
		if err := only("token", "token_file"); err != nil {
			return err
		}
		if set(s.Token) == set(s.TokenFile) {
			return errors.New("sasl.token: give sasl.token (e.g. ${KAFKA_TOKEN}) or sasl.token_file, one of them, with OAUTHBEARER")
		}
		if s.TokenFile != "" {
			if _, err := readToken(s.TokenFile); err != nil {
				return fmt.Errorf("sasl.token_file: %w", err)
			}
		}
	case mechMSKIAM:
		if err := only("access_key_id", "secret_access_key", "session_token"); err != nil {
			return err
		}
		if !tls {
			return errors.New("sasl.mechanism: AWS_MSK_IAM needs tls.enabled: true (MSK's IAM listeners, port 9098, take TLS only)")
		}
		if set(s.AccessKeyID) != set(s.SecretAccessKey) {
			return errors.New("sasl.secret_access_key: give sasl.access_key_id and sasl.secret_access_key together, or neither (then the environment's " +
				envAWSAccessKeyID + " and " + envAWSSecretAccessKey + " are read)")
		}
		if s.SessionToken != "" && s.AccessKeyID == "" {
			return errors.New("sasl.session_token: only with sasl.access_key_id")
		}
	case "":
		return errors.New("sasl.mechanism: empty (" + mechanisms + ")")
	default:
		return fmt.Errorf("sasl.mechanism: %q is not %s", s.Mechanism, mechanisms)
	}
	_, err := s.mechanism()
	return err
}

// mechanism returns the SASL mechanism, or nil when SASL is off.
func (s *saslConfig) mechanism() (sasl.Mechanism, error) {
	if s == nil {
		return nil, nil
	}
	switch s.Mechanism {
	case mechPlain:
		return plain.Auth{User: s.Username, Pass: s.Password}.AsMechanism(), nil
	case mechSCRAM256, mechSCRAM512:
		// SCRAM sends the SASLprep'd (RFC 4013) name and password; a
		// string SASLprep refuses cannot authenticate. The stringprep
		// error quotes the string it could not prepare: say which,
		// without either.
		if _, err := stringprep.SASLprep.Prepare(s.Username); err != nil {
			return nil, errors.New("sasl.username: not valid for SCRAM (SASLprep, RFC 4013, refuses it: a control character or an unassigned code point?)")
		}
		if _, err := stringprep.SASLprep.Prepare(s.Password); err != nil {
			return nil, errors.New("sasl.password: not valid for SCRAM (SASLprep, RFC 4013, refuses it: a control character or an unassigned code point?); the password is not repeated here")
		}
		a := scram.Auth{User: s.Username, Pass: s.Password}
		if s.Mechanism == mechSCRAM512 {
			return a.AsSha512Mechanism(), nil
		}
		return a.AsSha256Mechanism(), nil
	case mechOAuthBearer:
		if s.TokenFile == "" {
			return oauth.Auth{Token: s.Token}.AsMechanism(), nil
		}
		file := s.TokenFile
		return oauth.Oauth(func(context.Context) (oauth.Auth, error) {
			tok, err := readToken(file)
			if err != nil {
				return oauth.Auth{}, fmt.Errorf("sasl.token_file: %w", err)
			}
			return oauth.Auth{Token: tok}, nil
		}), nil
	case mechMSKIAM:
		if s.AccessKeyID != "" {
			return aws.Auth{AccessKey: s.AccessKeyID, SecretKey: s.SecretAccessKey, SessionToken: s.SessionToken}.AsManagedStreamingIAMMechanism(), nil
		}
		return aws.ManagedStreamingIAM(func(context.Context) (aws.Auth, error) {
			id, key := os.Getenv(envAWSAccessKeyID), os.Getenv(envAWSSecretAccessKey)
			if id == "" || key == "" {
				return aws.Auth{}, fmt.Errorf("sasl: AWS_MSK_IAM without sasl.access_key_id, and %s or %s is not set", envAWSAccessKeyID, envAWSSecretAccessKey)
			}
			return aws.Auth{AccessKey: id, SecretKey: key, SessionToken: os.Getenv(envAWSSessionToken)}, nil
		}), nil
	}
	return nil, fmt.Errorf("sasl.mechanism: %q is not %s", s.Mechanism, mechanisms)
}

// readToken reads an OAUTHBEARER token from file, without the line end.
// Errors name the file, never its content.
func readToken(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("%s is empty", file)
	}
	return tok, nil
}
