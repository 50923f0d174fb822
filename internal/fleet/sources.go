package fleet

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"strings"

	"github.com/walpost/walpost/internal/config"
)

// Source is one outbox a process relays: one configuration file, with
// its own database, slot, sinks, progress and dead letters.
type Source struct {
	// Name is the file's base name without its .yaml or .yml extension:
	// orders.yaml is the source "orders". It labels the source's metrics
	// and logs (source=orders) and names it in /sources and cdc status.
	Name string
	// Path is the configuration file.
	Path string
	// Config is the file, loaded (expanded, overridden by CDC_*
	// variables, defaulted and validated).
	Config *config.Config
}

// ErrNoSources is returned by Files for a directory without a
// configuration file.
var ErrNoSources = errors.New("fleet: no *.yaml or *.yml file")

// Files expands the --config arguments into configuration files: a file
// is itself; a directory stands for every *.yaml and *.yml file in it
// (not in its subdirectories, and not those whose name starts with a
// dot), sorted by name. Symbolic links are followed, as a Kubernetes
// ConfigMap volume needs.
func Files(args []string) ([]string, error) {
	var files []string
	for _, arg := range args {
		fi, err := os.Stat(arg)
		if err != nil {
			return nil, fmt.Errorf("reading config: %w", err)
		}
		if !fi.IsDir() {
			files = append(files, arg)
			continue
		}
		entries, err := os.ReadDir(arg)
		if err != nil {
			return nil, fmt.Errorf("reading config directory: %w", err)
		}
		n := len(files)
		for _, e := range entries { // sorted by name
			name := e.Name()
			if strings.HasPrefix(name, ".") || (filepath.Ext(name) != ".yaml" && filepath.Ext(name) != ".yml") {
				continue
			}
			p := filepath.Join(arg, name)
			if fi, err := os.Stat(p); err != nil || fi.IsDir() {
				continue // a dangling link, or a directory named x.yaml
			}
			files = append(files, p)
		}
		if len(files) == n {
			return nil, fmt.Errorf("config directory %s: %w", arg, ErrNoSources)
		}
	}
	return files, nil
}

// IsMulti reports whether the --config arguments make a process of
// several sources: more than one, or a directory (even of one file). One
// file is the single-source relay, as before fleets.
func IsMulti(args []string) bool {
	if len(args) != 1 {
		return len(args) > 1
	}
	fi, err := os.Stat(args[0])
	return err == nil && fi.IsDir()
}

// validName is what a source's name may be: the characters of a
// Kubernetes ConfigMap key, so that every name works as a file name in a
// ConfigMap, a metric label and a URL.
var validName = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// NameOf returns the source name of a configuration file: its base name
// without the .yaml or .yml extension.
func NameOf(path string) string {
	base := filepath.Base(path)
	for _, ext := range []string{".yaml", ".yml"} {
		if n, ok := strings.CutSuffix(base, ext); ok && n != "" {
			return n
		}
	}
	return base
}

// Load loads the sources the --config arguments name (Files). Every
// file must load; names must be valid and unique, and no two sources may
// name the same slot of the same postgres.url. Its errors are
// configuration errors (cdc run exits 2). A ${VAR} under unused may be
// unset (config.LoadFor: the settings cdc status does not use).
func Load(args []string, unused ...string) ([]Source, error) {
	files, err := Files(args)
	if err != nil {
		return nil, err
	}
	var sources []Source
	byName := map[string]string{}
	bySlot := map[[2]string]string{}
	for _, f := range files {
		name := NameOf(f)
		if !validName.MatchString(name) {
			return nil, fmt.Errorf("config %s: source name %q (the file's name without .yaml): use only letters, digits, '.', '_' and '-'", f, name)
		}
		if other, ok := byName[name]; ok {
			return nil, fmt.Errorf("config %s: source name %q is also %s's; each source needs a file name of its own", f, name, other)
		}
		cfg, err := config.LoadFor(f, unused...) // unused: what the command leaves unresolved (config.LoadFor)
		if err != nil {
			return nil, err
		}
		slot := [2]string{cfg.Postgres.URL, cfg.Postgres.Slot}
		if other, ok := bySlot[slot]; ok {
			return nil, fmt.Errorf("config %s: postgres.slot %q of the same postgres.url as source %s: two sources cannot share a slot", f, cfg.Postgres.Slot, other)
		}
		byName[name], bySlot[slot] = f, name
		sources = append(sources, Source{Name: name, Path: f, Config: cfg})
	}
	return sources, nil
}

// Shared is what a process has once, whatever its sources: the HTTP
// listener, the log, the tracing exporter and the number of threads.
type Shared struct {
	HTTP config.HTTP
	Log  config.Log
	// Tracing is the tracing: block of the sources that set it (nil:
	// none did; the OTEL_* variables alone decide, tracing.Start).
	Tracing *config.Tracing
	// Procs is the sum of the sources' relay.procs, at most the
	// machine's cores; 0 (every core) when a source says 0.
	Procs int
}

// SharedOf returns the process-wide settings of sources. http:, log: and
// tracing: are taken from the sources that set them (in the file, or by a
// CDC_* variable such as CDC_HTTP_LISTEN), which must agree; a source that
// sets none takes them. relay.procs adds up: each source's pipeline is
// worth its own threads, up to every core.
func SharedOf(sources []Source) (Shared, error) {
	var sh Shared
	var httpFrom, logFrom, tracingFrom string
	zero := false
	for i, s := range sources {
		c := s.Config
		if i == 0 {
			sh.HTTP, sh.Log = c.HTTP, c.Log
		}
		if anySet(c, "http", "http.listen") {
			if httpFrom != "" && !reflect.DeepEqual(sh.HTTP, c.HTTP) {
				return sh, fmt.Errorf("config %s: http: differs from source %s's; one process has one listener: give every source the same http:, or set it in one file only", s.Path, httpFrom)
			}
			if httpFrom == "" {
				sh.HTTP, httpFrom = c.HTTP, s.Name
			}
		}
		if anySet(c, "log", "log.level", "log.format") {
			if logFrom != "" && sh.Log != c.Log {
				return sh, fmt.Errorf("config %s: log: differs from source %s's; one process has one log: give every source the same log:, or set it in one file only", s.Path, logFrom)
			}
			if logFrom == "" {
				sh.Log, logFrom = c.Log, s.Name
			}
		}
		if c.Tracing != nil {
			if tracingFrom != "" && !reflect.DeepEqual(sh.Tracing, c.Tracing) {
				return sh, fmt.Errorf("config %s: tracing: differs from source %s's; one process has one exporter: give every source the same tracing:, or set it in one file only", s.Path, tracingFrom)
			}
			if tracingFrom == "" {
				sh.Tracing, tracingFrom = c.Tracing, s.Name
			}
		}
		if p := *c.Relay.Procs; p == 0 || zero {
			zero = true
		} else {
			sh.Procs += p
		}
	}
	if zero {
		sh.Procs = 0
	}
	sh.Procs = min(sh.Procs, runtime.NumCPU())
	return sh, nil
}

func anySet(c *config.Config, fields ...string) bool {
	return slices.ContainsFunc(fields, c.IsSet)
}
