package props

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/knadh/koanf/providers/confmap"
	"github.com/knadh/koanf/v2"
)

// DefaultFile is the file read when [LoadOptions.File] is empty, if it exists.
const DefaultFile = "baton.properties"

// LoadOptions says where [Load] reads values from. Precedence, lowest first:
// defaults < File < Env < Set < Flags.
type LoadOptions struct {
	// File is the properties file (--config). "" reads Dir/baton.properties
	// if it exists, else no file. A File that does not exist is an error.
	File string
	// Dir is where to look for baton.properties when File is ""; default ".".
	Dir string
	// NoFile reads no file at all, even if Dir/baton.properties exists.
	NoFile bool
	// Env is the environment in os.Environ() form; nil reads none. Only
	// variables starting with BATON_ are considered.
	Env []string
	// Set holds "key=value" overrides (--set), applied in order.
	Set []string
	// Flags holds values given by dedicated command-line flags, such as
	// --socket for sidecar.socket.path. They win over everything.
	Flags []Flag
}

// Flag is one value from a dedicated command-line flag.
type Flag struct {
	Name  string // as typed, e.g. "--socket"; the source label
	Key   string // property key it sets, e.g. "sidecar.socket.path"
	Value string
}

// SourceKind says which layer a value came from, in precedence order.
type SourceKind int

const (
	FromDefault SourceKind = iota // the built-in default
	FromFile                      // the properties file
	FromEnv                       // a BATON_ environment variable
	FromSet                       // a --set key=value
	FromFlag                      // a dedicated flag such as --socket
)

// Source is where a value came from.
type Source struct {
	Kind SourceKind
	File string // FromFile: the file as given
	Line int    // FromFile: 1-based line of the definition
	Name string // FromEnv: the variable; FromFlag: the flag, e.g. "--socket"
}

// String returns "default", "baton.properties:7", "env BATON_X", "--set" or the flag name.
func (s Source) String() string {
	switch s.Kind {
	case FromFile:
		return fmt.Sprintf("%s:%d", s.File, s.Line)
	case FromEnv:
		return "env " + s.Name
	case FromSet:
		return "--set"
	case FromFlag:
		return s.Name
	}
	return "default"
}

// prefix returns how an error or warning about key starts:
// "baton.properties:7: key", "env BATON_X: key", "--set key", "--socket key".
func (s Source) prefix(key string) string {
	switch s.Kind {
	case FromSet, FromFlag:
		return s.String() + " " + key
	}
	return s.String() + ": " + key
}

// FieldError is a value that failed validation. Load returns all of them,
// joined with errors.Join; find them with errors.As or by walking
// Unwrap() []error.
type FieldError struct {
	Source   Source // where the value came from: file and line, variable, --set
	Key      string // the property key; "" for a malformed --set argument
	Value    string // the value as given; [Redacted] for the secret key
	Expected string // what the value should have been, e.g. "a whole number of milliseconds"
}

// Error reads like
//
//	baton.properties:7: zookeeper.session.timeout: "5s" is not a whole number of milliseconds
//	env BATON_LOG_LEVEL: log.level: "loud" is not one of debug, info, warn, error
//	--set queue.workers: "0" is not a whole number from 1 to 1024
//
// The secret value is printed as <redacted>, without quotes.
func (e *FieldError) Error() string {
	v := fmt.Sprintf("%q", e.Value)
	if IsSecret(e.Key) {
		v = Redacted
	}
	if e.Key == "" {
		return fmt.Sprintf("%s: %s is not %s", e.Source, v, e.Expected)
	}
	return fmt.Sprintf("%s: %s is not %s", e.Source.prefix(e.Key), v, e.Expected)
}

func newFieldError(src Source, key, value, exp string) *FieldError {
	if IsSecret(key) {
		value = Redacted // never keep the secret in an error
	}
	return &FieldError{Source: src, Key: key, Value: value, Expected: exp}
}

// UnknownKeyError is a --set or flag naming a key that does not exist (in a
// file or the environment an unknown key is only a [Warning]).
type UnknownKeyError struct {
	Source     Source
	Key        string
	Suggestion string // closest known key, "" if none is close
}

// Error reads like `--set: unknown key "zookeeper.sesion.timeout" (did you mean "zookeeper.session.timeout"?)`.
func (e *UnknownKeyError) Error() string {
	return e.Source.String() + ": " + unknownMsg("key", e.Key, e.Suggestion)
}

func unknownMsg(what, name, suggestion string) string {
	if suggestion == "" {
		return fmt.Sprintf("unknown %s %q", what, name)
	}
	return fmt.Sprintf("unknown %s %q (did you mean %q?)", what, name, suggestion)
}

// Warning is a problem that does not stop loading: an unknown key in the
// file, an unknown BATON_ variable, a key defined twice.
type Warning struct {
	Source     Source
	Key        string // the unknown or duplicated key, or the unknown variable
	Suggestion string // closest known key or variable, "" if none is close or not an unknown name
	Msg        string // the text after the source
}

// String reads like
//
//	baton.properties:3: unknown key "zookeeper.sesion.timeout" (did you mean "zookeeper.session.timeout"?)
//	env BATON_ZOOKEEPER_SESION_TIMEOUT: unknown variable "BATON_ZOOKEEPER_SESION_TIMEOUT" (did you mean "BATON_ZOOKEEPER_SESSION_TIMEOUT"?)
//	baton.properties:9: duplicate key "log.level": this definition wins over line 2
func (w Warning) String() string { return w.Source.String() + ": " + w.Msg }

// Loaded is the result of [Load]: the typed configuration and, for every
// key, its effective raw value and where it came from.
type Loaded struct {
	Config Config
	// Values holds every key's effective raw value (surrounding whitespace
	// removed, except for the secret). It includes the secret: print values
	// through [Redact] or [Loaded.Lines].
	Values   map[string]string
	Sources  map[string]Source
	Warnings []Warning
	File     string // the properties file read, "" if none
}

// Lines returns one `key=value  # source` line per key, sorted as text, the
// secret redacted and values escaped as in a properties file. This is what
// `baton config check` prints.
func (l *Loaded) Lines() []string {
	keys := make([]string, 0, len(l.Values))
	for k := range l.Values {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = fmt.Sprintf("%s=%s  # %s", k, EscapeValue(Redact(k, l.Values[k])), l.Sources[k])
	}
	slices.Sort(out) // as text: kafka.sasl.password.file=… sorts before kafka.sasl.password=…
	return out
}

// String returns [Loaded.Lines] joined by newlines (secret redacted).
func (l *Loaded) String() string { return strings.Join(l.Lines(), "\n") }

// GoString is like String, so %#v does not print the secret either.
func (l *Loaded) GoString() string { return l.String() }

// Load reads defaults, the file, the environment, --set and flags (in
// increasing precedence) through koanf, and validates every value. It
// returns all problems joined (*FieldError, *UnknownKeyError,
// *SyntaxError, or a file error) and no *Loaded if there is any. Load
// changes nothing outside what it returns.
func Load(opts LoadOptions) (*Loaded, error) {
	l := &Loaded{Values: map[string]string{}, Sources: map[string]Source{}}
	var errs []error
	k := koanf.New(".")
	// Layers are flat maps: property keys are not nested at dots.
	load := func(m map[string]any) {
		if err := k.Load(confmap.Provider(m, ""), nil); err != nil {
			errs = append(errs, fmt.Errorf("props: %w", err))
		}
	}

	// Defaults.
	defaults := make(map[string]any, len(defs))
	for i := range defs {
		defaults[defs[i].key] = defaultValue(&defs[i])
		l.Sources[defs[i].key] = Source{Kind: FromDefault}
	}
	load(defaults)

	// File.
	file, err := chooseFile(opts)
	if err != nil {
		return nil, err
	}
	if file != "" {
		l.File = file
		p := &Parser{}
		if err := k.Load(FileProvider(file), p); err != nil {
			if se, ok := errors.AsType[*SyntaxError](err); ok {
				se.File = file
				return nil, se
			}
			return nil, fileError(opts, file, err)
		}
		seen := map[string]int{}
		for _, pr := range p.Properties {
			src := Source{Kind: FromFile, File: file, Line: pr.Line}
			if prev, dup := seen[pr.Key]; dup {
				l.Warnings = append(l.Warnings, Warning{Source: src, Key: pr.Key,
					Msg: fmt.Sprintf("duplicate key %q: this definition wins over line %d", pr.Key, prev)})
			}
			seen[pr.Key] = pr.Line
			if _, known := byKey[pr.Key]; !known {
				if l.hasUnknownWarning(pr.Key) {
					continue
				}
				sug := suggest(pr.Key, keyNames())
				l.Warnings = append(l.Warnings, Warning{Source: src, Key: pr.Key, Suggestion: sug, Msg: unknownMsg("key", pr.Key, sug)})
				continue
			}
			l.Sources[pr.Key] = src
		}
	}

	// Environment.
	envMap := map[string]any{}
	for _, kv := range opts.Env {
		name, val, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(name, EnvPrefix) || reservedEnv[name] {
			continue
		}
		d, known := byEnv[name]
		if !known {
			if !l.hasUnknownWarning(name) {
				sug := suggest(name, envNames())
				l.Warnings = append(l.Warnings, Warning{Source: Source{Kind: FromEnv, Name: name}, Key: name,
					Suggestion: sug, Msg: unknownMsg("variable", name, sug)})
			}
			continue
		}
		envMap[d.key] = val
		l.Sources[d.key] = Source{Kind: FromEnv, Name: name}
	}
	load(envMap)

	// --set and flags.
	setMap := map[string]any{}
	for _, kv := range opts.Set {
		key, val, ok := strings.Cut(kv, "=")
		key = strings.TrimSpace(key)
		src := Source{Kind: FromSet}
		switch {
		case !ok || key == "":
			errs = append(errs, &FieldError{Source: src, Value: kv, Expected: "key=value"})
		case byKey[key] == nil:
			errs = append(errs, &UnknownKeyError{Source: src, Key: key, Suggestion: suggest(key, keyNames())})
		default:
			setMap[key] = val
			l.Sources[key] = src
		}
	}
	load(setMap)
	flagMap := map[string]any{}
	for _, f := range opts.Flags {
		src := Source{Kind: FromFlag, Name: f.Name}
		if byKey[f.Key] == nil {
			errs = append(errs, &UnknownKeyError{Source: src, Key: f.Key})
			continue
		}
		flagMap[f.Key] = f.Value
		l.Sources[f.Key] = src
	}
	load(flagMap)

	// Parse every key; collect every error.
	for i := range defs {
		d := &defs[i]
		raw := k.String(d.key)
		v := raw
		if !d.secret {
			v = strings.TrimSpace(raw)
		}
		l.Values[d.key] = v
		if err := d.set(&l.Config, v); err != nil {
			errs = append(errs, newFieldError(l.Sources[d.key], d.key, v, err.Error()))
		}
	}
	if len(errs) == 0 {
		errs = crossCheck(&l.Config, l.Values, l.Sources)
	}
	if len(errs) > 0 {
		slices.SortStableFunc(errs, func(a, b error) int { return cmpErrSource(a) - cmpErrSource(b) })
		return nil, errors.Join(errs...)
	}
	return l, nil
}

// cmpErrSource orders errors as the user reads the sources: file lines
// first, then environment, --set and flags; the order within a layer is kept.
func cmpErrSource(err error) int {
	var src Source
	switch e := err.(type) {
	case *FieldError:
		src = e.Source
	case *UnknownKeyError:
		src = e.Source
	default:
		return 0
	}
	return int(src.Kind)<<32 | src.Line
}

func (l *Loaded) hasUnknownWarning(name string) bool {
	for _, w := range l.Warnings {
		if w.Key == name && strings.HasPrefix(w.Msg, "unknown") {
			return true
		}
	}
	return false
}

// FileError is a properties file that cannot be read. Error reads
// "--config /x/y.properties: no such file" when the file was given with
// --config (LoadOptions.File), else "FILE: <cause>".
type FileError struct {
	File   string
	Config bool // given as --config
	Err    error
}

func (e *FileError) Error() string {
	cause := e.Err.Error()
	if pe, ok := errors.AsType[*fs.PathError](e.Err); ok {
		cause = pe.Err.Error() // the path is named already
	}
	if errors.Is(e.Err, fs.ErrNotExist) {
		cause = "no such file"
	}
	if e.Config {
		return "--config " + e.File + ": " + cause
	}
	return e.File + ": " + cause
}

func (e *FileError) Unwrap() error { return e.Err }

func fileError(opts LoadOptions, file string, err error) error {
	return &FileError{File: file, Config: opts.File != "", Err: err}
}

// chooseFile returns the file to read, "" for none.
func chooseFile(opts LoadOptions) (string, error) {
	switch {
	case opts.NoFile:
		return "", nil
	case opts.File != "":
		return opts.File, nil
	}
	dir := opts.Dir
	if dir == "" {
		dir = "."
	}
	f := filepath.Join(dir, DefaultFile)
	switch _, err := os.Stat(f); {
	case err == nil:
		return f, nil
	case errors.Is(err, fs.ErrNotExist):
		return "", nil
	default:
		return "", fmt.Errorf("props: %w", err)
	}
}

func keyNames() []string {
	out := make([]string, len(defs))
	for i, d := range defs {
		out[i] = d.key
	}
	return out
}

func envNames() []string {
	out := make([]string, len(defs))
	for i, d := range defs {
		out[i] = EnvName(d.key)
	}
	return out
}

// Change is a key whose effective value differs after [Reload].
type Change struct {
	Key      string
	Old, New string // raw values; [Redacted] for the secret
	Class    Class
	// Applied is false for Restart keys: the returned configuration keeps
	// Old until the sidecar restarts.
	Applied bool
}

// String reads like `log.level: "info" -> "debug" (live)` or
// `queue.workers: "4" -> "8" (restart: kept until restart)`.
func (c Change) String() string {
	q := func(s string) string {
		if s == Redacted {
			return s
		}
		return fmt.Sprintf("%q", s)
	}
	s := fmt.Sprintf("%s: %s -> %s (%s", c.Key, q(c.Old), q(c.New), c.Class)
	if !c.Applied {
		s += ": kept until restart"
	}
	return s + ")"
}

// Reload loads the configuration again with opts and compares it with cur.
// On any error it returns the error and nil: cur is never modified, so
// nothing changes. Otherwise it returns the configuration to use from now
// on and the keys whose value changed, in key-table order. A changed Restart key
// is reported with Applied false, and next keeps cur's value and source for
// it, so it is reported again on every reload until the restart. Values are
// compared after parsing ("0660" and "660" are equal).
func Reload(cur *Loaded, opts LoadOptions) (next *Loaded, changes []Change, err error) {
	if cur == nil {
		return nil, nil, errors.New("props: reload without a current configuration")
	}
	next, err = Load(opts)
	if err != nil {
		return nil, nil, err
	}
	for i := range defs {
		d := &defs[i]
		oldV, newV := cur.Values[d.key], next.Values[d.key]
		if sameValue(d, oldV, newV) {
			continue
		}
		c := Change{Key: d.key, Old: Redact(d.key, oldV), New: Redact(d.key, newV), Class: d.class, Applied: d.class != Restart}
		if !c.Applied {
			if err := d.set(&next.Config, oldV); err != nil {
				return nil, nil, fmt.Errorf("props: reload: keep %s: %w", d.key, err) // cur was valid: cannot happen
			}
			next.Values[d.key] = oldV
			next.Sources[d.key] = cur.Sources[d.key]
		}
		changes = append(changes, c)
	}
	return next, changes, nil
}

// sameValue reports whether a and b parse to the same configuration for d.
func sameValue(d *keyDef, a, b string) bool {
	if a == b {
		return true
	}
	var ca, cb Config
	ea, eb := d.set(&ca, a), d.set(&cb, b)
	return ea == nil && eb == nil && reflect.DeepEqual(ca, cb)
}
