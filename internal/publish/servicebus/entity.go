package servicebus

import (
	"errors"
	"fmt"
	"strings"

	"github.com/walpost/walpost/internal/publish/nametmpl"
)

// maxEntityLen is the longest queue or topic name Service Bus accepts.
const maxEntityLen = 260

// maxSessionIDLen is the longest SessionId Service Bus accepts.
const maxSessionIDLen = 128

// errIllegalEntity is wrapped by every entity name error, so that tests and
// callers can tell it apart.
var errIllegalEntity = errors.New("servicebus: illegal entity name")

func legalEntityChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' || c == '/'
}

func alnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// entityShape checks where Service Bus lets characters stand.
func entityShape(name string) error {
	switch {
	case !alnum(name[0]) || !alnum(name[len(name)-1]):
		return fmt.Errorf("%w: it must start and end with a letter or digit", errIllegalEntity)
	case strings.Contains(name, "//"):
		return fmt.Errorf("%w: empty path segment", errIllegalEntity)
	}
	return nil
}

// entityValue refuses a '/' in what a message's type or key brings into
// an entity name: a path separator would let it reach another entity's
// path ("orders/Subscriptions/…", "…/$management"). '$', '?', '#' and
// every other character outside [a-zA-Z0-9._/-] are refused with the
// whole name.
func entityValue(v string) error {
	if i := strings.IndexByte(v, '/'); i >= 0 {
		return fmt.Errorf("%w: '/' at offset %d: a path separator may come only from the template", errIllegalEntity, i)
	}
	return nil
}

// entityRules are Service Bus's rules for queue and topic names: 1 to 260
// characters of [a-zA-Z0-9._/-], starting and ending with a letter or
// digit, with no empty path segment; a '/' only from the template. No
// name starts with '$' ($management, $cbs), which the character set
// refuses.
var entityRules = nametmpl.Rules{
	Broker: "Service Bus", MaxLen: maxEntityLen, LegalChar: legalEntityChar,
	Allowed: "a-z, A-Z, 0-9, '.', '_', '-' and '/'", Illegal: errIllegalEntity, Extra: entityShape,
	Value: entityValue,
}

// entityTemplate expands "outbox.{type}" into an entity name per message.
type entityTemplate = nametmpl.Template

// parseEntity parses and checks an entity template from config field
// field. Errors start with the field ("queue: ...").
func parseEntity(field, text string) (*entityTemplate, error) {
	return nametmpl.Parse(field, text, entityRules)
}
