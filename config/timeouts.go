package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Defaults of the timeouts a file leaves out: the gateway's behaviour
// before they were configurable.
const (
	DefaultResolveTimeout        = 5 * time.Second
	DefaultDialTimeout           = 10 * time.Second
	DefaultTLSHandshakeTimeout   = 10 * time.Second
	DefaultResponseHeaderTimeout = 60 * time.Second
	DefaultTunnelIdleTimeout     = 10 * time.Minute
)

// Timeouts bound the gateway's waits on upstreams (the timeouts block). A
// reload applies them to requests and tunnels that start after it.
type Timeouts struct {
	// Resolve bounds one DNS lookup of an upstream name (and, read at
	// start only, one upstream lookup of the sandbox's DNS server).
	Resolve time.Duration
	// Dial bounds one TCP connect to an upstream.
	Dial time.Duration
	// TLSHandshake bounds the TLS handshake with an upstream of an
	// intercepted (transform) host or an https:// request.
	TLSHandshake time.Duration
	// ResponseHeader is how long an upstream may take to start its answer
	// once the request is sent; then the client gets 504 upstream-timeout.
	ResponseHeader time.Duration
	// TunnelIdle ends a tunnel in which no byte moved either way for this
	// long.
	TunnelIdle time.Duration
}

// timeoutField is one configurable timeout: where it is, its default, and
// the largest value that is surely not a typo.
type timeoutField struct {
	name string
	def  time.Duration
	max  time.Duration
	dst  func(*Timeouts) *time.Duration
	src  func(*fileTimeouts) string
}

var timeoutFields = []timeoutField{
	{"resolve", DefaultResolveTimeout, time.Minute,
		func(t *Timeouts) *time.Duration { return &t.Resolve }, func(f *fileTimeouts) string { return string(f.Resolve) }},
	{"dial", DefaultDialTimeout, 5 * time.Minute,
		func(t *Timeouts) *time.Duration { return &t.Dial }, func(f *fileTimeouts) string { return string(f.Dial) }},
	{"tls_handshake", DefaultTLSHandshakeTimeout, 5 * time.Minute,
		func(t *Timeouts) *time.Duration { return &t.TLSHandshake }, func(f *fileTimeouts) string { return string(f.TLSHandshake) }},
	{"response_header", DefaultResponseHeaderTimeout, time.Hour,
		func(t *Timeouts) *time.Duration { return &t.ResponseHeader }, func(f *fileTimeouts) string { return string(f.ResponseHeader) }},
	{"tunnel_idle", DefaultTunnelIdleTimeout, 24 * time.Hour,
		func(t *Timeouts) *time.Duration { return &t.TunnelIdle }, func(f *fileTimeouts) string { return string(f.TunnelIdle) }},
}

// maxResponseHeader bounds an entry's response_header as the top-level one.
const maxResponseHeader = time.Hour

// compileTimeouts fills c.Timeouts, and each entry's response_header.
func (c *Config) compileTimeouts(ft fileTimeouts, entries []fileEntry, r *reporter) {
	for _, f := range timeoutFields {
		*f.dst(&c.Timeouts) = f.def
		if d, ok := parseTimeout("timeouts."+f.name, f.src(&ft), f.max, r); ok {
			*f.dst(&c.Timeouts) = d
		}
	}
	for i, e := range entries {
		field := fmt.Sprintf("network.allowlist[%d].timeouts.response_header", i)
		if d, ok := parseTimeout(field, string(e.Timeouts.ResponseHeader), maxResponseHeader, r); ok && i < len(c.Entries) {
			c.Entries[i].ResponseHeaderTimeout = d
		}
	}
}

// parseTimeout reads a Go duration string; false when it is empty (the
// default applies) or wrong (reported).
func parseTimeout(field, s string, max time.Duration, r *reporter) (time.Duration, bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, false
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		if _, nerr := strconv.ParseFloat(s, 64); nerr == nil {
			r.at(field, "%q has no unit; did you mean %q?", s, s+"s")
		} else {
			r.at(field, "%q is not a duration (e.g. 90s, 5m)", s)
		}
	case d <= 0:
		r.at(field, "must be more than 0, got %q", s)
	case d > max:
		r.at(field, "%q is more than the limit of %s", s, shortDuration(max))
	default:
		return d, true
	}
	return 0, false
}

// shortDuration prints 1h rather than 1h0m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// How the sandbox's DNS server answers a denied name (network.dns.denied).
const (
	// DNSDeniedRefuse answers REFUSED: the name does not resolve.
	DNSDeniedRefuse = "refuse"
	// DNSDeniedSinkhole answers with an address of the transparent
	// listener, so that the client connects and reads the gateway's 403.
	DNSDeniedSinkhole = "sinkhole"
)

func (c *Config) compileDNSDenied(s string, r *reporter) {
	switch v := strings.ToLower(strings.TrimSpace(s)); v {
	case "", DNSDeniedRefuse:
		c.DNSDenied = DNSDeniedRefuse
	case DNSDeniedSinkhole:
		c.DNSDenied = DNSDeniedSinkhole
	default:
		c.DNSDenied = DNSDeniedRefuse
		r.at("network.dns.denied", "%q is not a choice; use refuse (the default) or sinkhole", s)
	}
}
