// Package transform holds the header rules of allowlist entries that inject
// credentials: the configured headers, their values with secret references
// (${env:NAME}, ${file:/path}) resolved once at load into a Secret that
// redacts itself, the strip-then-set Apply for outgoing requests, and a
// streaming Scrubber that removes echoed secrets from responses.
//
// The package imports no network library beyond net/http's types: it never
// dials, and it knows nothing of proxies or TLS.
//
// # Value syntax
//
// A configured value is literal text with any number of embedded references:
//
//		Authorization: "Bearer ${env:TELEMETRY_TOKEN}"
//		X-Api-Key:     "${file:/run/secrets/api_key}"
//		X-Pair:        "${env:USER_ID}:${file:/run/secrets/pass}"
//
//	  - ${env:NAME} is the environment variable NAME; unset or empty is an error.
//	  - ${file:PATH} is the content of the file PATH with trailing newlines
//	    (LF or CRLF) trimmed; missing, unreadable or empty is an error. PATH is
//	    absolute, or relative to Options.Dir when that is set.
//	  - "$$" is a literal "$" (as in docker compose), so "$${env:X}" is the
//	    literal text "${env:X}". A "$" followed by anything other than "{" or
//	    "$" is literal.
//
// A resolved value may not contain control characters other than horizontal
// tab (no CR/LF header injection) and is at most MaxValueLen bytes.
//
// Literal text is configuration, not a secret: it may appear in References
// and is not scrubbed. Only the resolved parts (and whole values that contain
// one) are Secrets. Errors name the reference (${env:X}, ${file:/p}) and never
// include a resolved value, file contents, or a value's literal text.
package transform

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// MaxValueLen bounds a header value after resolution (and so every secret).
// It also bounds the overlap the Scrubber keeps between reads.
const MaxValueLen = 16 << 10

// HeaderSpec is one configured header as decoded from the config file.
type HeaderSpec struct {
	Name  string // header name as written
	Value string // value as written, with references
	Line  int    // line in the config file, for messages; 0 if unknown
}

// Options lets callers (and tests) replace the environment and file system.
// The zero value uses os.LookupEnv and os.ReadFile, and requires absolute
// file paths.
type Options struct {
	// LookupEnv resolves ${env:NAME}. If nil, os.LookupEnv.
	LookupEnv func(name string) (string, bool)
	// ReadFile resolves ${file:PATH}. If nil, os.ReadFile.
	ReadFile func(path string) ([]byte, error)
	// Dir is the directory relative file paths are resolved against
	// (typically the config file's directory). If empty, a relative path is
	// an error.
	Dir string
}

func (o Options) lookupEnv() func(string) (string, bool) {
	if o.LookupEnv != nil {
		return o.LookupEnv
	}
	return os.LookupEnv
}

func (o Options) readFile() func(string) ([]byte, error) {
	if o.ReadFile != nil {
		return o.ReadFile
	}
	return os.ReadFile
}

// Errors a SpecError wraps; classify with errors.Is.
var (
	ErrSyntax          = errors.New("invalid reference syntax")
	ErrUnknownScheme   = errors.New("unknown reference scheme")
	ErrUnresolved      = errors.New("unresolved reference")
	ErrEmpty           = errors.New("empty value")
	ErrInvalidValue    = errors.New("invalid header value")
	ErrInvalidName     = errors.New("invalid header name")
	ErrForbiddenHeader = errors.New("header cannot be set by a transform")
	ErrDuplicate       = errors.New("header set twice")
)

// SpecError reports which configured header is wrong and why. It never
// carries a secret: Err names references, not their values.
type SpecError struct {
	Index int    // position in the specs given to Compile
	Name  string // header name as written
	Line  int    // HeaderSpec.Line
	Field string // "name" or "value"
	Err   error
}

func (e *SpecError) Error() string {
	where := fmt.Sprintf("transform header %q", e.Name)
	if e.Line > 0 {
		where += fmt.Sprintf(" (line %d)", e.Line)
	}
	return fmt.Sprintf("%s: %s: %v", where, e.Field, e.Err)
}

func (e *SpecError) Unwrap() error { return e.Err }

// Compile resolves every value and validates the specs. The first error is
// returned as a *SpecError.
func Compile(specs []HeaderSpec, opts Options) (*Rules, error) {
	return CompileSpec(Spec{Headers: specs}, opts)
}

// CompileSpec resolves and validates every credential of one entry: its
// headers, its Basic credentials and its query parameters. The first error
// is a *SpecError (a header) or a *CredentialError (basic, query).
func CompileSpec(spec Spec, opts Options) (*Rules, error) {
	specs := spec.Headers
	r := &Rules{refs: make(map[string]string, len(specs))}
	seen := make(map[string]int, len(specs))
	var secrets, envNames []string
	for i, sp := range specs {
		fail := func(field string, err error) (*Rules, error) {
			return nil, &SpecError{Index: i, Name: sp.Name, Line: sp.Line, Field: field, Err: err}
		}
		if err := checkName(sp.Name); err != nil {
			return fail("name", err)
		}
		name := http.CanonicalHeaderKey(sp.Name)
		// Names that differ only in case or in '_' against '-' are one
		// header to a CGI-style backend (see SameHeaderName); Apply would
		// strip each with the other, then send both.
		key := strings.ReplaceAll(strings.ToLower(name), "_", "-")
		if j, dup := seen[key]; dup {
			return fail("name", fmt.Errorf("%w: %q is already set by %q", ErrDuplicate, sp.Name, specs[j].Name))
		}
		seen[key] = i
		res, err := resolve(sp.Value, opts)
		if err != nil {
			return fail("value", err)
		}
		r.headers = append(r.headers, header{name: name, value: newSecret(res.value)})
		r.refs[name] = sp.Value
		if len(res.parts) > 0 {
			secrets = append(secrets, res.parts...)
			secrets = append(secrets, res.value)
		}
		envNames = append(envNames, res.envNames...)
	}
	more, err := r.addCredentials(spec, opts)
	if err != nil {
		return nil, err
	}
	secrets = append(secrets, more.secrets...)
	envNames = append(envNames, more.envNames...)
	sort.Strings(envNames)
	r.envNames = slices.Compact(envNames)
	sort.Slice(r.headers, func(a, b int) bool { return r.headers[a].name < r.headers[b].name })
	for _, h := range r.headers {
		r.names = append(r.names, h.name)
	}
	r.scrubber = newScrubber(secrets)
	if r.scrubber != nil {
		for _, s := range r.scrubber.strs {
			r.secrets = append(r.secrets, newSecret(s))
		}
	}
	return r, nil
}

// checkName validates a transform header name: an RFC 7230 token that is
// neither hop-by-hop nor framing.
func checkName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty", ErrInvalidName)
	}
	for i := 0; i < len(name); i++ {
		if !isTokenChar(name[i]) {
			return fmt.Errorf("%w: %q contains %q; a header name is an RFC 7230 token", ErrInvalidName, name, name[i])
		}
	}
	switch {
	case isHopByHop(name), hasPrefixFold(name, "Proxy-"):
		return fmt.Errorf("%w: %q is hop-by-hop (it applies to one connection and is stripped)", ErrForbiddenHeader, name)
	case strings.EqualFold(name, "Host"), strings.EqualFold(name, "Content-Length"):
		return fmt.Errorf("%w: %q is controlled by the gateway", ErrForbiddenHeader, name)
	}
	return nil
}

func isTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// resolution is a value as resolved: the whole value, the resolved parts
// (the secrets), and the names of the environment variables read.
type resolution struct {
	value    string
	parts    []string
	envNames []string
}

// resolve expands the references of a value as written.
func resolve(written string, opts Options) (resolution, error) {
	var res resolution
	var b strings.Builder
	for i := 0; i < len(written); {
		c := written[i]
		if c != '$' || i+1 == len(written) {
			b.WriteByte(c)
			i++
			continue
		}
		switch written[i+1] {
		case '$':
			b.WriteByte('$')
			i += 2
			continue
		case '{':
		default:
			b.WriteByte('$')
			i++
			continue
		}
		end := strings.IndexByte(written[i+2:], '}')
		if end < 0 {
			return resolution{}, fmt.Errorf(`%w: unterminated "${" at byte %d (write "$$" for a literal "$")`, ErrSyntax, i)
		}
		ref := written[i : i+2+end+1]
		body := written[i+2 : i+2+end]
		part, err := resolveRef(ref, body, opts)
		if err != nil {
			return resolution{}, err
		}
		b.WriteString(part)
		res.parts = append(res.parts, part)
		if name, ok := strings.CutPrefix(body, "env:"); ok {
			res.envNames = append(res.envNames, name)
		}
		i += len(ref)
		if b.Len() > MaxValueLen {
			break
		}
	}
	res.value = b.String()
	switch {
	case res.value == "":
		return resolution{}, fmt.Errorf("%w: a transform sets a header; an empty value is not allowed", ErrEmpty)
	case len(res.value) > MaxValueLen:
		return resolution{}, fmt.Errorf("%w: longer than %d bytes once resolved", ErrInvalidValue, MaxValueLen)
	}
	if i := indexCTL(res.value); i >= 0 {
		if len(res.parts) == 0 {
			return resolution{}, fmt.Errorf("%w: contains a control character", ErrInvalidValue)
		}
		return resolution{}, fmt.Errorf("%w: contains a control character once resolved (check the referenced secret for embedded newlines)", ErrInvalidValue)
	}
	return res, nil
}

// resolveRef resolves one ${scheme:arg}; ref is the whole reference, body
// what is between the braces.
func resolveRef(ref, body string, opts Options) (string, error) {
	scheme, arg, ok := strings.Cut(body, ":")
	if !ok {
		return "", fmt.Errorf("%w: %s has no scheme; want ${env:NAME} or ${file:/path}", ErrSyntax, ref)
	}
	switch scheme {
	case "env":
		if arg == "" || strings.ContainsAny(arg, "=\x00${") {
			return "", fmt.Errorf("%w: %s: invalid environment variable name", ErrSyntax, ref)
		}
		v, ok := opts.lookupEnv()(arg)
		if !ok {
			return "", fmt.Errorf("%w: %s: environment variable %s is not set", ErrUnresolved, ref, arg)
		}
		if v == "" {
			return "", fmt.Errorf("%w: %s: environment variable %s is empty", ErrEmpty, ref, arg)
		}
		return v, nil
	case "file":
		if arg == "" || strings.ContainsAny(arg, "\x00${") {
			return "", fmt.Errorf("%w: %s: invalid file path", ErrSyntax, ref)
		}
		path := arg
		if !filepath.IsAbs(path) {
			if opts.Dir == "" {
				return "", fmt.Errorf("%w: %s: file path must be absolute", ErrSyntax, ref)
			}
			path = filepath.Join(opts.Dir, path)
		}
		data, err := opts.readFile()(path)
		if err != nil {
			return "", fmt.Errorf("%w: %s: cannot read %s: %v", ErrUnresolved, ref, path, readCause(err))
		}
		v := strings.TrimRight(string(data), "\r\n")
		if v == "" {
			return "", fmt.Errorf("%w: %s: file %s is empty", ErrEmpty, ref, path)
		}
		return v, nil
	default:
		return "", fmt.Errorf("%w: %q in %s; want env or file", ErrUnknownScheme, scheme, ref)
	}
}

// readCause reduces a read error to its cause without echoing anything a
// custom reader may have put in its message: the errno of a PathError, or a
// generic classification.
func readCause(err error) string {
	var pe *fs.PathError
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "no such file"
	case errors.Is(err, fs.ErrPermission):
		return "permission denied"
	case errors.As(err, &pe):
		return pe.Err.Error()
	default:
		return "read error"
	}
}

// indexCTL returns the index of the first byte not allowed in a header field
// value (control characters except HTAB, and DEL), or -1.
func indexCTL(s string) int {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return i
		}
	}
	return -1
}
