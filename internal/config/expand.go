package config

import (
	"fmt"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

var refRE = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}`)

// expansion records what a scalar's value was made from.
type expansion struct {
	vars   []string // the variables referenced, in order
	values []string // what each of them gave (its value or its default)
}

func expand(s string, lookup func(string) (string, bool)) (string, expansion, error) {
	var x expansion
	var missing string
	out := refRE.ReplaceAllStringFunc(s, func(ref string) string {
		m := refRE.FindStringSubmatch(ref)
		v, ok := lookup(m[1])
		switch {
		case ok:
		case m[2] != "":
			v = m[3]
		default:
			if missing == "" {
				missing = m[1]
			}
			return ref
		}
		x.vars = append(x.vars, m[1])
		x.values = append(x.values, v)
		return v
	})
	if missing != "" {
		return "", x, fmt.Errorf("environment variable %s is not set (referenced as ${%s}; use ${%s:-default} for a default)",
			missing, missing, missing)
	}
	return out, x, nil
}

// expandTree expands the references in every scalar value below n (not in
// keys) and records in refs what each expanded node was made from. An
// expanded node is tagged !!str: its value is the text it expands to,
// never YAML to be resolved (see the package doc for how the decoder types
// it). Aliases are not followed: their anchor is expanded where it stands.
//
// A variable that is not set is an error, unless the value is under one
// of x.unused's fields (a command that does not use them: sinks for cdc
// init): the value is then left empty and its field recorded in
// x.unresolved (Config.Unresolved).
func expandTree(n *yaml.Node, path string, lookup func(string) (string, bool), refs map[*yaml.Node]expansion, x *expandOptions) error {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if err := expandTree(c, path, lookup, refs, x); err != nil {
				return err
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			if err := expandTree(c, fmt.Sprintf("%s[%d]", path, i), lookup, refs, x); err != nil {
				return err
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			p := path
			if !isMerge(k) {
				p = joinPath(path, k.Value)
			}
			if err := expandTree(n.Content[i+1], p, lookup, refs, x); err != nil {
				return err
			}
		}
	case yaml.ScalarNode:
		if !strings.Contains(n.Value, "${") {
			return nil
		}
		v, e, err := expand(n.Value, lookup)
		if err != nil && x.isUnused(path) {
			n.Value, n.Tag = "", "!!str"
			x.unresolved = append(x.unresolved, path)
			return nil
		}
		if err != nil {
			return &Error{Field: path, Msg: err.Error(), Line: n.Line}
		}
		if len(e.vars) == 0 {
			return nil
		}
		n.Value, n.Tag = v, "!!str"
		refs[n] = e
	}
	return nil
}

// expandOptions are what a command leaves unresolved (ParseFor).
type expandOptions struct {
	unused     []string // fields whose variables may be unset
	unresolved []string // the fields left empty for an unset variable
}

// isUnused reports whether path is one of x.unused or below one.
func (x *expandOptions) isUnused(path string) bool {
	for _, u := range x.unused {
		if under(path, u) {
			return true
		}
	}
	return false
}

// under reports whether path is field or a setting below it.
func under(path, field string) bool {
	return path == field || strings.HasPrefix(path, field) && (path[len(field)] == '.' || path[len(field)] == '[')
}

// isMerge reports whether a mapping key is YAML's merge key "<<".
func isMerge(k *yaml.Node) bool {
	return k.Kind == yaml.ScalarNode && k.Value == "<<" && (k.Tag == "" || k.Tag == "!" || k.ShortTag() == "!!merge")
}
