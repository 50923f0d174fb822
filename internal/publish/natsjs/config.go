package natsjs

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/publish/envelope"
	"github.com/walpost/walpost/internal/publish/tlsconf"
	"github.com/walpost/walpost/internal/redact"
)

// natsConfig holds a nats sink's own settings: the keys of its YAML
// mapping besides name, kind and route (see docs/sinks/nats.md).
type natsConfig struct {
	envelope.Settings `yaml:",inline"`

	// Servers are the NATS servers, nats://host:port, tls://host:port or
	// host:port; at least one.
	Servers []string `yaml:"servers"`
	// Subject is a subject or a template with {type} and {key}.
	Subject string `yaml:"subject"`
	// Stream names the stream the subjects belong to and, with create,
	// has the sink create it.
	Stream streamConfig `yaml:"stream"`
	// MaxPending is the most messages published and not yet acknowledged
	// by a PubAck (default 512).
	MaxPending int `yaml:"max_pending"`
	// ConnectTimeout bounds dialing one server, the TLS handshake and
	// authentication (default 10s).
	ConnectTimeout config.Duration `yaml:"connect_timeout"`
	// AckTimeout bounds the wait for one message's PubAck (default 10s).
	AckTimeout config.Duration `yaml:"ack_timeout"`
	// ClientName is the connection name the server shows (default walpost).
	ClientName string `yaml:"client_name"`
	// ScheduleSubject is the subject prefix under which a message whose
	// deliver_at is still to come is stored as a JetStream message
	// schedule (server 2.12+, a stream with allow_msg_schedules that
	// covers both it and the message's subject): <schedule_subject>.<id>,
	// with Nats-Schedule "@at <deliver_at>" and Nats-Schedule-Target the
	// message's subject. Required for columns.deliver_at.
	ScheduleSubject string `yaml:"schedule_subject"`

	// Authentication: at most one of credentials_file, nkey_seed_file,
	// token and user (with password).
	CredentialsFile string `yaml:"credentials_file"`
	NKeySeedFile    string `yaml:"nkey_seed_file"`
	Token           string `yaml:"token"`
	User            string `yaml:"user"`
	Password        string `yaml:"password"`

	// TLS configures encryption; off by default (a tls:// server turns it
	// on with the system's roots).
	TLS tlsconf.Switch `yaml:"tls"`
}

// streamConfig is the stream: part of the settings.
type streamConfig struct {
	// Name is the stream's name. When set, every message is published
	// with Nats-Expected-Stream: a message that another stream would take
	// is refused (Permanent).
	Name string `yaml:"name"`
	// Create has the sink create the stream, when missing, on its first
	// connection (default false).
	Create bool `yaml:"create"`
	// Subjects are the created stream's subjects (default: the subject
	// template's wildcard form, "outbox.{type}" → "outbox.>").
	Subjects []string `yaml:"subjects"`
	// Storage is file (default) or memory; Replicas 1 to 5 (default 1);
	// DuplicateWindow the window in which Nats-Msg-Id drops resends
	// (default 2m). Only with create.
	Storage         string          `yaml:"storage"`
	Replicas        int             `yaml:"replicas"`
	DuplicateWindow config.Duration `yaml:"duplicate_window"`
}

const (
	defaultMaxPending      = 512
	defaultTimeout         = 10 * time.Second
	defaultClientName      = "walpost"
	defaultDuplicateWindow = 2 * time.Minute
)

// limits is the table of allowed ranges, checked by Validate.
var limits = struct {
	maxPending      [2]int
	timeout         [2]time.Duration
	replicas        [2]int
	duplicateWindow [2]time.Duration
}{
	maxPending:      [2]int{1, 65536},
	timeout:         [2]time.Duration{100 * time.Millisecond, 10 * time.Minute},
	replicas:        [2]int{1, 5},
	duplicateWindow: [2]time.Duration{time.Second, 7 * 24 * time.Hour},
}

// SetDefaults fills in the fields left unset.
func (c *natsConfig) SetDefaults() {
	c.Settings.SetDefaults()
	if c.MaxPending == 0 {
		c.MaxPending = defaultMaxPending
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = config.Duration(defaultTimeout)
	}
	if c.AckTimeout == 0 {
		c.AckTimeout = config.Duration(defaultTimeout)
	}
	if c.ClientName == "" {
		c.ClientName = defaultClientName
	}
	if c.Stream.Create {
		if c.Stream.Storage == "" {
			c.Stream.Storage = "file"
		}
		if c.Stream.Replicas == 0 {
			c.Stream.Replicas = 1
		}
		if c.Stream.DuplicateWindow == 0 {
			c.Stream.DuplicateWindow = config.Duration(defaultDuplicateWindow)
		}
		if len(c.Stream.Subjects) == 0 {
			if t, err := parseSubject(c.Subject); err == nil {
				if w := t.wildcard(); w != ">" {
					c.Stream.Subjects = []string{w}
				}
			}
			if len(c.Stream.Subjects) > 0 && c.ScheduleSubject != "" {
				// The schedules must be in the stream of their targets.
				w := c.Stream.Subjects[0]
				if !strings.HasSuffix(w, ">") || !strings.HasPrefix(c.ScheduleSubject+".", strings.TrimSuffix(w, ">")) {
					c.Stream.Subjects = append(c.Stream.Subjects, c.ScheduleSubject+".>")
				}
			}
		}
	}
}

// Validate checks every field and names the first bad one, starting at the
// field ("subject: empty"); the registry prefixes the sink.
func (c *natsConfig) Validate() error {
	if err := c.Settings.Validate(); err != nil {
		return err
	}
	if p := headerValueProblem(c.Source); c.IsCloudEvents() && p != "" {
		return fmt.Errorf("source: %q: its value %s (it travels in the ce-source header)", c.Source, p)
	}
	if err := validateServers(c.Servers); err != nil {
		return err
	}
	if _, err := parseSubject(c.Subject); err != nil {
		return err
	}
	if err := c.Stream.validate(c.Subject); err != nil {
		return err
	}
	if c.ScheduleSubject != "" {
		t, err := parseSubject(c.ScheduleSubject)
		if err != nil || !t.Fixed() {
			return fmt.Errorf("schedule_subject: %q is not a subject without wildcards or placeholders (e.g. outbox.scheduled)", c.ScheduleSubject)
		}
	}
	if c.MaxPending < limits.maxPending[0] || c.MaxPending > limits.maxPending[1] {
		return fmt.Errorf("max_pending: %d is outside %d..%d", c.MaxPending, limits.maxPending[0], limits.maxPending[1])
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"connect_timeout", c.ConnectTimeout.D()}, {"ack_timeout", c.AckTimeout.D()}} {
		if f.d < limits.timeout[0] || f.d > limits.timeout[1] {
			return fmt.Errorf("%s: %s is outside %s..%s", f.name, f.d, limits.timeout[0], limits.timeout[1])
		}
	}
	if err := c.validateAuth(); err != nil {
		return err
	}
	return c.TLS.Validate()
}

// validateServers checks the server list. Errors show a server through
// redact.URL: a nats://user:password@host URL is legal.
func validateServers(servers []string) error {
	if len(servers) == 0 {
		return errors.New(`servers: empty (list at least one, e.g. ["nats://127.0.0.1:4222"])`)
	}
	for i, s := range servers {
		if err := checkServer(s); err != nil {
			return fmt.Errorf("servers[%d]: %q %s", i, showServer(s), err)
		}
	}
	return nil
}

// showServer returns a server as errors and logs show it: as written when
// it cannot hold a password (no '@'), else through redact.URL.
func showServer(s string) string {
	if !strings.Contains(s, "@") {
		return s
	}
	return redact.URL(s)
}

func checkServer(s string) error {
	hostport := s
	if strings.Contains(s, "://") {
		u, err := url.Parse(s)
		if err != nil {
			return errors.New("is not a URL (nats://host:port)")
		}
		switch u.Scheme {
		case "nats", "tls":
		default:
			return errors.New("has a scheme other than nats:// or tls://")
		}
		if u.Path != "" && u.Path != "/" || u.RawQuery != "" {
			return errors.New("has a path or query; give nats://host:port")
		}
		hostport = u.Host
		if u.Port() == "" {
			hostport = net.JoinHostPort(u.Hostname(), "4222")
		}
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil || host == "" {
		return errors.New("is not host:port or nats://host:port")
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return errors.New("has a port that is not 1..65535")
	}
	return nil
}

func (c *natsConfig) validateAuth() error {
	var set []string
	for _, f := range []struct {
		name string
		on   bool
	}{{"credentials_file", c.CredentialsFile != ""}, {"nkey_seed_file", c.NKeySeedFile != ""},
		{"token", c.Token != ""}, {"user", c.User != ""}} {
		if f.on {
			set = append(set, f.name)
		}
	}
	if len(set) > 1 {
		return fmt.Errorf("%s: set together with %s (use one way to authenticate)", set[1], set[0])
	}
	switch {
	case c.Password != "" && c.User == "":
		return errors.New("password: set, but user is empty")
	case c.User != "" && c.Password == "":
		return errors.New("password: empty, but user is set (use ${VAR} to take it from the environment)")
	}
	for _, f := range []struct{ name, path string }{{"credentials_file", c.CredentialsFile}, {"nkey_seed_file", c.NKeySeedFile}} {
		if f.path == "" {
			continue
		}
		// Opened, never printed: the file holds a secret.
		fh, err := os.Open(f.path)
		if err != nil {
			return fmt.Errorf("%s: %w", f.name, pathError(err))
		}
		fh.Close()
	}
	return nil
}

// pathError keeps the operation and path of a file error and its cause.
func pathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s %s: %w", pe.Op, pe.Path, pe.Err)
	}
	return err
}

// streamNameOK reports whether NATS accepts name as a stream name; the
// sink is stricter than the server (which refuses whitespace, '.', '*',
// '>', path separators and control characters).
func streamNameOK(name string) bool {
	if name == "" || len(name) > 255 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func (s *streamConfig) validate(subject string) error {
	if s.Name != "" && !streamNameOK(s.Name) {
		return fmt.Errorf("stream.name: %q is not 1 to 255 characters of a-z, A-Z, 0-9, '_' and '-'", s.Name)
	}
	if !s.Create {
		for _, f := range []struct {
			name string
			set  bool
		}{{"subjects", len(s.Subjects) > 0}, {"storage", s.Storage != ""}, {"replicas", s.Replicas != 0},
			{"duplicate_window", s.DuplicateWindow != 0}} {
			if f.set {
				return fmt.Errorf("stream.%s: set, but stream.create is false (it configures the stream the sink creates)", f.name)
			}
		}
		return nil
	}
	if s.Name == "" {
		return errors.New("stream.name: empty, but stream.create is true (name the stream to create)")
	}
	if len(s.Subjects) == 0 {
		return fmt.Errorf("stream.subjects: empty, and subject %q starts with a placeholder, so its wildcard form would be \">\" (every subject): list the stream's subjects", subject)
	}
	for i, sub := range s.Subjects {
		if err := checkFilter(sub); err != nil {
			return fmt.Errorf("stream.subjects[%d]: %q: %w", i, sub, err)
		}
	}
	switch s.Storage {
	case "file", "memory":
	default:
		return fmt.Errorf("stream.storage: %q is not file or memory", s.Storage)
	}
	if s.Replicas < limits.replicas[0] || s.Replicas > limits.replicas[1] {
		return fmt.Errorf("stream.replicas: %d is outside %d..%d", s.Replicas, limits.replicas[0], limits.replicas[1])
	}
	if d := s.DuplicateWindow.D(); d < limits.duplicateWindow[0] || d > limits.duplicateWindow[1] {
		return fmt.Errorf("stream.duplicate_window: %s is outside %s..%s", d, limits.duplicateWindow[0], limits.duplicateWindow[1])
	}
	return nil
}
