package config

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/walpost/walpost/internal/redact"
)

// Sink is one destination. Kind-specific settings are decoded by the sink
// with Decode. A Sink is not modified after loading and is safe to read
// from several goroutines.
type Sink struct {
	Name  string `yaml:"name"`
	Kind  string `yaml:"kind"`
	Route Route  `yaml:"route"`
	// ClaimCheck is the sink's effective claim check (its own claim_check,
	// else relay.claim_check; nil when off), set by Config.SetDefaults.
	ClaimCheck *ClaimCheck `yaml:"claim_check"`
	// Line is where the sink is defined in the file (0 when not from a file).
	Line int `yaml:"-"`
	// DeliverAt and ExpiresAt say the outbox maps columns.deliver_at and
	// columns.expires_at (set by Config.SetDefaults): a sink kind that
	// cannot honour one refuses the configuration, naming the sink and the
	// property (publish.Prepare).
	DeliverAt, ExpiresAt bool `yaml:"-"`

	node *yaml.Node               // the sink's mapping, variables expanded
	path string                   // "sinks[i]" when loaded by Parse, "" when not
	refs map[*yaml.Node]expansion // which of node's scalars were expanded
}

// UnmarshalYAML decodes the sink's name, kind and route and keeps the node
// so that the sink kind can decode its own settings. It is what
// yaml.Unmarshal uses (tests build a Sink so); Parse decodes sinks itself,
// with their index and the expanded variables.
func (s *Sink) UnmarshalYAML(n *yaml.Node) error {
	d := &decoder{}
	return d.decode(n, reflect.ValueOf(s).Elem(), "")
}

// Decode decodes the sink's kind-specific settings into v, a pointer to a
// struct, strictly and without a round trip through YAML text: a key that
// is neither name, kind, route nor a field of v is an error naming it, as
// is a value of the wrong type. Errors are *Error values whose Field is
// the setting's path (sinks[1].batch_size when the sink came from Parse,
// batch_size when not) and whose Line is its line in the file.
func (s *Sink) Decode(v any) error {
	if s.node == nil {
		return nil
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("config: Sink.Decode needs a non-nil pointer, not %T", v)
	}
	d := &decoder{refs: s.refs, skip: sinkKeys, skipPath: s.path}
	return d.decode(s.node, rv.Elem(), s.path)
}

// LineOf returns the line of key's value in the sink's mapping (kind,
// name, …), or the sink's own line when it has no such key; 0 when the
// sink did not come from a file.
func (s *Sink) LineOf(key string) int {
	if s.node != nil && s.node.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(s.node.Content); i += 2 {
			if s.node.Content[i].Value == key {
				return s.node.Content[i+1].Line
			}
		}
	}
	return s.Line
}

// WrapError returns err, an error from preparing the sink configured as
// sinks[index], as the error to show: an *Error about one of the sink's
// settings is returned with the field path sinks[index].setting (Decode
// gives it that path already when the sink came from Parse), and any other
// error is prefixed "sinks[index] (name): ".
func (s *Sink) WrapError(index int, err error) error {
	var e *Error
	if errors.As(err, &e) && error(e) == err {
		if strings.HasPrefix(e.Field, "sinks[") {
			return e
		}
		c := *e
		c.Field = joinPath(fmt.Sprintf("sinks[%d]", index), e.Field)
		return &c
	}
	if s.path != "" && s.Line > 0 { // from a file (Parse)
		return fmt.Errorf("sinks[%d] (%s): %w (line %d)", index, s.Name, err, s.Line)
	}
	return fmt.Errorf("sinks[%d] (%s): %w", index, s.Name, err)
}

// secrets returns the secret values among the sink's settings: every
// scalar under a key that redact.IsSecretKey (at any depth) or under the
// sink's own headers: mapping, with the key
// and signature of a connection string in it, and the password of any URL
// among the other values.
func (s *Sink) secrets() []string {
	var out []string
	seen := map[*yaml.Node]bool{}
	var walk func(n *yaml.Node, secret bool)
	walk = func(n *yaml.Node, secret bool) {
		switch n.Kind {
		case yaml.AliasNode:
			if n.Alias != nil && !seen[n] {
				seen[n] = true
				walk(n.Alias, secret)
			}
		case yaml.SequenceNode:
			for _, c := range n.Content {
				walk(c, secret)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i]
				// A sink's headers: (webhook) may carry credentials under
				// any name (X-Api-Key, a token in a custom header).
				if n == s.node && k.Value == "headers" {
					headerSecrets(n.Content[i+1], &out)
				}
				walk(n.Content[i+1], secret || (k.Kind == yaml.ScalarNode && redact.IsSecretKey(k.Value)))
			}
		case yaml.ScalarNode:
			_, expanded := s.refs[n]
			if n.Value == "" || (!expanded && n.ShortTag() == "!!null") {
				return
			}
			v := n.Value
			if secret {
				out = append(out, v)
			}
			if strings.Contains(strings.ToLower(v), "sharedaccess") {
				out = append(out, redact.ConnectionStringSecrets(v)...)
			}
			if secret || hasURLPassword(v) {
				out = append(out, redact.URLSecrets(v)...)
			}
		}
	}
	if s.node != nil {
		walk(s.node, false)
	}
	return out
}

// minHeaderSecret is the shortest header value taken for a secret: a
// credential is longer, and redacting every "on" or "1" in the output
// would garble it.
const minHeaderSecret = 8

// headerSecrets appends the values of a sink's headers: mapping that may
// be credentials (at least minHeaderSecret bytes).
func headerSecrets(n *yaml.Node, out *[]string) {
	if n.Kind != yaml.MappingNode {
		return
	}
	for i := 1; i < len(n.Content); i += 2 {
		if v := n.Content[i]; v.Kind == yaml.ScalarNode && len(v.Value) >= minHeaderSecret {
			*out = append(*out, v.Value)
		}
	}
}

// hasURLPassword reports whether v looks like a URL with a password in its
// userinfo.
func hasURLPassword(v string) bool {
	_, rest, ok := strings.Cut(v, "://")
	if !ok {
		return false
	}
	at := strings.LastIndexByte(rest, '@')
	return at > 0 && strings.Contains(rest[:at], ":")
}
