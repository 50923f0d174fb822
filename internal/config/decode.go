package config

import (
	"encoding"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/walpost/walpost/internal/redact"
)

// maxVisits bounds the nodes one decode visits, aliases counted each time
// they are followed: a file of a few kilobytes can otherwise expand to
// billions of values through nested aliases.
const maxVisits = 100_000

// source is where a setting's value came from.
type source struct {
	line int       // line in the file; 0 if not from the file
	x    expansion // variables the value was expanded from, if any
	env  string    // CDC_* variable that overrode it, if any
}

// decoder decodes a node tree into Go values strictly (see decode). It is
// used for one decode and not safe for concurrent use.
type decoder struct {
	// refs are the scalar nodes that expandTree expanded.
	refs map[*yaml.Node]expansion
	// src, when not nil, receives where each decoded setting came from.
	src map[string]source
	// skip are keys of the mapping at skipPath that belong to someone
	// else: a sink's name, kind and route, when the sink kind decodes the
	// rest. They are listed among the known keys.
	skip     []string
	skipPath string

	visits    int
	following map[*yaml.Node]bool // aliases being followed, to refuse a loop

	// collect: an unknown key or a bad value is recorded in errs and
	// decoding goes on with the next setting, so that one run reports
	// every such mistake of the file (Parse).
	collect bool
	errs    []*Error
}

// keep returns err, or nil after recording it when d collects and err is
// about one setting (an *Error that is not about the file's size).
func (d *decoder) keep(err error) error {
	var e *Error
	if !d.collect || !errors.As(err, &e) || d.visits > maxVisits {
		return err
	}
	d.errs = append(d.errs, e)
	return nil
}

// expandedSize counts the nodes of n with aliases followed (an alias that
// leads back into itself is not followed again), stopping once the count
// passes limit.
func expandedSize(n *yaml.Node, limit int, following map[*yaml.Node]bool) int {
	count := 1
	if n.Kind == yaml.AliasNode {
		if n.Alias == nil || following[n] {
			return count
		}
		following[n] = true
		defer delete(following, n)
		return count + expandedSize(n.Alias, limit, following)
	}
	for _, c := range n.Content {
		if count > limit {
			break
		}
		count += expandedSize(c, limit-count, following)
	}
	return count
}

// pair is one key and value of a mapping, merges resolved.
type pair struct{ key, value *yaml.Node }

// decode sets v from n. Unknown keys, keys set twice and values of the
// wrong shape or type are errors naming path; scalars are read according
// to v's type (see the package doc). A null value leaves v as it is, or
// sets it to nil when v is a pointer, slice, map or interface.
func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) error {
	d.visits++
	if d.visits > maxVisits {
		return &Error{Field: path, Msg: fmt.Sprintf("more than %d values, counting each use of an alias (an alias bomb?)", maxVisits), Line: n.Line}
	}
	switch n.Kind {
	case yaml.AliasNode:
		return d.alias(n, func(target *yaml.Node) error { return d.decode(target, v, path) }, path)
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil
		}
		return d.decode(n.Content[0], v, path)
	}
	d.note(path, n)

	if v.CanAddr() {
		switch p := v.Addr().Interface().(type) {
		case *Duration:
			return d.duration(n, p, path)
		case *Sink:
			return d.sink(n, p, path)
		}
	}
	if d.isNull(n, v.Type()) {
		switch v.Kind() {
		case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Interface:
			v.Set(reflect.Zero(v.Type()))
		}
		return nil
	}
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		return d.decode(n, v.Elem(), path)
	}
	if v.CanAddr() {
		switch u := v.Addr().Interface().(type) {
		case yaml.Unmarshaler:
			if err := u.UnmarshalYAML(n); err != nil {
				return d.fail(path, n, "%s", d.scrub(n, path, strings.TrimPrefix(err.Error(), "yaml: ")))
			}
			return nil
		case encoding.TextUnmarshaler:
			if n.Kind != yaml.ScalarNode {
				return d.want(path, n, "a single value")
			}
			if err := u.UnmarshalText([]byte(n.Value)); err != nil {
				return d.fail(path, n, "%s: %s", d.describe(n, path), d.scrub(n, path, err.Error()))
			}
			return nil
		}
	}

	switch v.Kind() {
	case reflect.Struct:
		return d.structure(n, v, path)
	case reflect.Map:
		return d.mapping(n, v, path)
	case reflect.Slice:
		return d.sequence(n, v, path)
	case reflect.Interface:
		var x any
		if err := n.Decode(&x); err != nil {
			return d.fail(path, n, "%s", d.scrub(n, path, strings.TrimPrefix(err.Error(), "yaml: ")))
		}
		if x == nil {
			v.Set(reflect.Zero(v.Type()))
		} else {
			v.Set(reflect.ValueOf(x))
		}
		return nil
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			return d.want(path, n, "a single value")
		}
		s := n.Value
		if _, expanded := d.refs[n]; !expanded && n.ShortTag() == "!!binary" {
			if err := n.Decode(&s); err != nil {
				return d.fail(path, n, "not valid base64 after !!binary")
			}
		}
		v.SetString(s)
		return nil
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return d.number(n, v, path)
	}
	return fmt.Errorf("config: %s: cannot decode into a %s", path, v.Type())
}

// alias follows an alias node, refusing one that leads back to itself.
func (d *decoder) alias(n *yaml.Node, f func(*yaml.Node) error, path string) error {
	if n.Alias == nil || d.following[n] {
		return &Error{Field: path, Msg: fmt.Sprintf("alias *%s refers to a value that contains it", n.Value), Line: n.Line}
	}
	if d.following == nil {
		d.following = map[*yaml.Node]bool{}
	}
	d.following[n] = true
	defer delete(d.following, n)
	return f(n.Alias)
}

// note records where the value at path came from.
func (d *decoder) note(path string, n *yaml.Node) {
	if d.src != nil && path != "" {
		d.src[path] = source{line: n.Line, x: d.refs[n]}
	}
}

// isNull reports whether n stands for no value for a setting of type t: a
// null in the file (null, ~, nothing), or an expanded value that is empty
// or null where the setting is not a string.
func (d *decoder) isNull(n *yaml.Node, t reflect.Type) bool {
	if n.Kind != yaml.ScalarNode {
		return false
	}
	if _, expanded := d.refs[n]; !expanded {
		return n.ShortTag() == "!!null"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() == reflect.String || t.Kind() == reflect.Interface {
		return false
	}
	return plainTag(strings.TrimSpace(n.Value)) == "!!null"
}

// plainTag is the tag YAML resolves text to as a plain scalar.
func plainTag(text string) string {
	return (&yaml.Node{Kind: yaml.ScalarNode, Value: text}).ShortTag()
}

// describe names a scalar's value for an error: quoted when it is from the
// file, by its variables when it was expanded (it may be a secret), and
// not at all when the setting's name says it is a secret.
func (d *decoder) describe(n *yaml.Node, path string) string {
	switch {
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.AliasNode:
		return "an alias"
	case len(d.refs[n].vars) > 0:
		return fromVars(d.refs[n].vars)
	case redact.IsSecretKey(lastKey(path)):
		return "the value"
	}
	return quote(n.Value)
}

// scrub takes out of msg, an error from code that decoded n (a
// yaml.Unmarshaler's), the value of n and of the variables it was expanded
// from, which the code may have quoted.
func (d *decoder) scrub(n *yaml.Node, path string, msg string) string {
	x, expanded := d.refs[n]
	if !expanded && !redact.IsSecretKey(lastKey(path)) {
		return msg
	}
	for _, v := range append([]string{n.Value}, x.values...) {
		if v != "" {
			msg = strings.ReplaceAll(msg, v, "…")
		}
	}
	return msg
}

// fail returns an *Error at path and n's line; format's verbs take args.
func (d *decoder) fail(path string, n *yaml.Node, format string, args ...any) error {
	return &Error{Field: path, Msg: fmt.Sprintf(format, args...), Line: n.Line}
}

// want reports a value of the wrong shape.
func (d *decoder) want(path string, n *yaml.Node, what string) error {
	return d.fail(path, n, "want %s, got %s", what, d.describe(n, path))
}

func (d *decoder) duration(n *yaml.Node, p *Duration, path string) error {
	if n.Kind != yaml.ScalarNode {
		return d.want(path, n, "a duration (e.g. 500ms, 10s, 1m)")
	}
	if d.isNull(n, reflect.TypeFor[Duration]()) {
		return nil
	}
	v, err := time.ParseDuration(strings.TrimSpace(n.Value))
	if err != nil {
		return d.fail(path, n, "%s is not a duration (use e.g. 500ms, 10s, 1m)", d.describe(n, path))
	}
	*p = Duration(v)
	return nil
}

// number reads a scalar into a bool, integer or float according to YAML's
// rules for a plain scalar, whatever its quoting: "10" and 10 are both 10.
func (d *decoder) number(n *yaml.Node, v reflect.Value, path string) error {
	if n.Kind != yaml.ScalarNode {
		return d.want(path, n, "a single value")
	}
	text := strings.TrimSpace(n.Value)
	plain := &yaml.Node{Kind: yaml.ScalarNode, Value: text}
	tag := plain.ShortTag()
	switch v.Kind() {
	case reflect.Bool:
		var b bool
		if tag == "!!null" || plain.Decode(&b) != nil {
			return d.fail(path, n, "%s is not true or false", d.describe(n, path))
		}
		v.SetBool(b)
	case reflect.Float32, reflect.Float64:
		var f float64
		if (tag != "!!int" && tag != "!!float") || plain.Decode(&f) != nil || v.OverflowFloat(f) {
			return d.fail(path, n, "%s is not a number", d.describe(n, path))
		}
		v.SetFloat(f)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		i, ok := wholeNumber(plain, tag)
		if !ok {
			return d.fail(path, n, "%s is not a whole number", d.describe(n, path))
		}
		if v.OverflowInt(i) {
			return d.fail(path, n, "%s is too large", d.describe(n, path))
		}
		v.SetInt(i)
	default: // unsigned
		var u uint64
		if tag == "!!int" && plain.Decode(&u) == nil {
			if v.OverflowUint(u) {
				return d.fail(path, n, "%s is too large", d.describe(n, path))
			}
			v.SetUint(u)
			return nil
		}
		i, ok := wholeNumber(plain, tag)
		switch {
		case !ok:
			return d.fail(path, n, "%s is not a whole number", d.describe(n, path))
		case i < 0:
			return d.fail(path, n, "%s is negative", d.describe(n, path))
		case v.OverflowUint(uint64(i)):
			return d.fail(path, n, "%s is too large", d.describe(n, path))
		}
		v.SetUint(uint64(i))
	}
	return nil
}

// wholeNumber reads a plain scalar as an int64: an integer, or a float
// without a fraction (1e3).
func wholeNumber(plain *yaml.Node, tag string) (int64, bool) {
	switch tag {
	case "!!int":
		var i int64
		if plain.Decode(&i) == nil {
			return i, true
		}
	case "!!float":
		var f float64
		if plain.Decode(&f) == nil && f == math.Trunc(f) && math.Abs(f) < 1<<63 {
			return int64(f), true
		}
	}
	return 0, false
}

// pairs returns the keys and values of a mapping, those merged in with
// "<<" after the mapping's own (which win), refusing a key set twice.
func (d *decoder) pairs(n *yaml.Node, path string) ([]pair, error) {
	d.visits++
	if d.visits > maxVisits {
		return nil, &Error{Field: path, Msg: fmt.Sprintf("more than %d values, counting each use of an alias (an alias bomb?)", maxVisits), Line: n.Line}
	}
	var own, merged []pair
	seen := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.AliasNode && k.Alias != nil {
			k = k.Alias
		}
		if isMerge(k) {
			m, err := d.merge(val, path)
			if err != nil {
				return nil, err
			}
			merged = append(merged, m...)
			continue
		}
		if k.Kind != yaml.ScalarNode {
			return nil, d.fail(path, k, "a key is %s, not a name", d.describe(k, path))
		}
		if first, dup := seen[k.Value]; dup {
			return nil, d.fail(joinPath(path, k.Value), k, "set twice (first at line %d)", first.Line)
		}
		seen[k.Value] = k
		own = append(own, pair{k, val})
	}
	for _, p := range merged {
		if _, ok := seen[p.key.Value]; !ok {
			seen[p.key.Value] = p.key
			own = append(own, p)
		}
	}
	return own, nil
}

// merge returns the pairs that "<<: value" merges in: value is a mapping
// or a list of them, usually aliases; of a key in several, the first wins.
func (d *decoder) merge(val *yaml.Node, path string) ([]pair, error) {
	switch val.Kind {
	case yaml.AliasNode:
		var out []pair
		err := d.alias(val, func(target *yaml.Node) error {
			var err error
			out, err = d.merge(target, path)
			return err
		}, path)
		return out, err
	case yaml.MappingNode:
		return d.pairs(val, path)
	case yaml.SequenceNode:
		var out []pair
		for _, c := range val.Content {
			if c.Kind == yaml.SequenceNode {
				return nil, d.fail(path, c, "<< merges a mapping or a list of mappings, not a list of lists")
			}
			m, err := d.merge(c, path)
			if err != nil {
				return nil, err
			}
			out = append(out, m...)
		}
		return out, nil
	}
	return nil, d.fail(path, val, "<< merges a mapping or a list of mappings, not %s", d.describe(val, path))
}

// field is a settable field of a struct and its YAML key.
type field struct {
	key   string
	index []int
}

// structFields lists t's fields by YAML key, in declaration order, the
// fields of `yaml:",inline"` structs in place.
func structFields(t reflect.Type) []field {
	var out []field
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() && !f.Anonymous {
			continue
		}
		tag := f.Tag.Get("yaml")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if strings.Contains(","+opts+",", ",inline,") && f.Type.Kind() == reflect.Struct {
			for _, sub := range structFields(f.Type) {
				sub.index = append([]int{i}, sub.index...)
				out = append(out, sub)
			}
			continue
		}
		if !f.IsExported() {
			continue // an embedded unexported type that is not inline
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out = append(out, field{key: name, index: []int{i}})
	}
	return out
}

func (d *decoder) structure(n *yaml.Node, v reflect.Value, path string) error {
	if n.Kind != yaml.MappingNode {
		if path == "" {
			return d.fail(path, n, "the file is not a mapping of settings (postgres: …, sinks: …)")
		}
		return d.want(path, n, "a mapping (key: value)")
	}
	fields := structFields(v.Type())
	pairs, err := d.pairs(n, path)
	if err != nil {
		return err
	}
	skipping := d.skip != nil && path == d.skipPath
	for _, p := range pairs {
		key := p.key.Value
		if skipping && slices.Contains(d.skip, key) {
			continue
		}
		var f *field
		for i := range fields {
			if fields[i].key == key {
				f = &fields[i]
				break
			}
		}
		if f == nil {
			var known []string
			if skipping {
				known = append(known, d.skip...)
			}
			for _, f := range fields {
				known = append(known, f.key)
			}
			hint := "this mapping takes no keys"
			if len(known) > 0 {
				hint = "known keys: " + strings.Join(known, ", ")
			}
			if err := d.keep(d.fail(joinPath(path, key), p.key, "unknown key %s (check its spelling and indentation; %s)", quote(key), hint)); err != nil {
				return err
			}
			continue
		}
		if err := d.keep(d.decode(p.value, v.FieldByIndex(f.index), joinPath(path, key))); err != nil {
			return err
		}
	}
	return nil
}

func (d *decoder) mapping(n *yaml.Node, v reflect.Value, path string) error {
	if n.Kind != yaml.MappingNode {
		return d.want(path, n, "a mapping (key: value)")
	}
	pairs, err := d.pairs(n, path)
	if err != nil {
		return err
	}
	if v.IsNil() {
		v.Set(reflect.MakeMapWithSize(v.Type(), len(pairs)))
	}
	for _, p := range pairs {
		k := reflect.New(v.Type().Key()).Elem()
		if err := d.decode(p.key, k, path); err != nil {
			return err
		}
		e := reflect.New(v.Type().Elem()).Elem()
		if err := d.keep(d.decode(p.value, e, joinPath(path, p.key.Value))); err != nil {
			return err
		}
		v.SetMapIndex(k, e)
	}
	return nil
}

func (d *decoder) sequence(n *yaml.Node, v reflect.Value, path string) error {
	if n.Kind != yaml.SequenceNode {
		return d.want(path, n, "a list")
	}
	s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, c := range n.Content {
		if err := d.keep(d.decode(c, s.Index(i), fmt.Sprintf("%s[%d]", path, i))); err != nil {
			return err
		}
	}
	v.Set(s)
	return nil
}

// sinkKeys are the keys of a sink that config decodes; the kind decodes
// the rest with Sink.Decode.
var sinkKeys = []string{"name", "kind", "route", "claim_check"}

// sink decodes a sink's name, kind, route and claim_check, ignoring its other keys
// (they are the kind's), and keeps the node for Sink.Decode.
func (d *decoder) sink(n *yaml.Node, s *Sink, path string) error {
	if n.Kind != yaml.MappingNode {
		return d.want(path, n, "a mapping (name: …, kind: …, and the kind's settings)")
	}
	pairs, err := d.pairs(n, path)
	if err != nil {
		return err
	}
	common := reflect.ValueOf(&struct {
		Name       *string
		Kind       *string
		Route      *Route
		ClaimCheck **ClaimCheck
	}{&s.Name, &s.Kind, &s.Route, &s.ClaimCheck}).Elem()
	for _, p := range pairs {
		for i, key := range sinkKeys {
			if p.key.Value == key {
				if err := d.keep(d.decode(p.value, common.Field(i).Elem(), joinPath(path, key))); err != nil {
					return err
				}
			}
		}
	}
	s.Line, s.node, s.path, s.refs = n.Line, n, path, d.refs
	return nil
}
