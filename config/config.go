package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"github.com/rs/zerolog"
	"gopkg.in/yaml.v3"

	"github.com/hookgate/hookgate/allowlist"
)

// DefaultProxyListen is the explicit proxy's address when listen.proxy is empty.
const DefaultProxyListen = "127.0.0.1:3128"

// Config is a validated gateway configuration.
type Config struct {
	// File is where the configuration came from, for messages.
	File string
	// ProxyListen is the explicit proxy's listen address.
	ProxyListen string
	// Allowlist is the compiled network.allowlist.
	Allowlist *allowlist.Policy
	// AllowCIDRs re-open blocked non-loopback ranges (network.allow_cidrs).
	AllowCIDRs []netip.Prefix
	// DNSServers are the resolvers to use; empty means the system resolver.
	DNSServers []netip.AddrPort
	// UpstreamCAFile adds roots for verifying upstream TLS; may be empty.
	UpstreamCAFile string
	// LogLevel is the minimum level logged.
	LogLevel zerolog.Level
}

// Load reads and validates the configuration file at path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, Errors{{File: path, Msg: err.Error()}}
	}
	return Parse(path, data)
}

// Parse validates a configuration; file names it in messages. The error, if
// any, is an Errors listing every problem found.
func Parse(file string, data []byte) (*Config, error) {
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil && !errors.Is(err, io.EOF) {
		return nil, yamlErrors(file, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, Errors{{File: file, Line: extra.Line, Msg: "more than one YAML document; a config file holds exactly one"}}
	}
	var errs Errors
	var fc fileConfig
	if root.Kind != 0 {
		checkFields(&root, reflect.TypeOf(fc), "", &errs, file)
		if len(errs) > 0 {
			return nil, errs
		}
		if err := root.Decode(&fc); err != nil {
			return nil, yamlErrors(file, err)
		}
	}
	c := &Config{File: file}
	at := func(field, format string, args ...any) {
		errs = append(errs, &Error{File: file, Line: lineOf(&root, field), Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	c.compileListen(fc.Listen, at)
	c.compileNetwork(fc.Network, at)
	c.UpstreamCAFile = fc.Upstream.CAFile
	c.compileLog(fc.Log, at)
	if len(errs) > 0 {
		return nil, errs
	}
	return c, nil
}

// reporter records an error at a field.
type reporter func(field, format string, args ...any)

func (c *Config) compileListen(l fileListen, at reporter) {
	c.ProxyListen = l.Proxy
	if c.ProxyListen == "" {
		c.ProxyListen = DefaultProxyListen
	}
	if err := ValidateListen(c.ProxyListen); err != nil {
		at("listen.proxy", "%v", err)
	}
}

// ValidateListen checks a host:port listen address.
func ValidateListen(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port (e.g. 127.0.0.1:3128)", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port %q is not a number from 0 to 65535", port)
	}
	if host != "" {
		if _, err := netip.ParseAddr(host); err != nil && host != "localhost" {
			return fmt.Errorf("listen on an IP address, not %q", host)
		}
	}
	return nil
}

func (c *Config) compileNetwork(n fileNetwork, at reporter) {
	domains := make([]string, len(n.Allowlist))
	for i, e := range n.Allowlist {
		domains[i] = e.Domain
	}
	p, err := allowlist.New(domains)
	var ee *allowlist.EntryError
	switch {
	case errors.As(err, &ee):
		at(fmt.Sprintf("network.allowlist[%d].domain", ee.Index), "%v", ee.Err)
	case err != nil:
		at("network.allowlist", "%v", err)
	}
	c.Allowlist = p

	for i, s := range n.AllowCIDRs {
		field := fmt.Sprintf("network.allow_cidrs[%d]", i)
		pfx, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			at(field, "%q is not a CIDR (e.g. 10.20.0.0/16)", s)
			continue
		}
		if pfx != pfx.Masked() {
			at(field, "%q has host bits set; did you mean %q?", s, pfx.Masked().String())
			continue
		}
		if err := allowlist.ValidateAllowCIDR(pfx); err != nil {
			at(field, "%v", err)
			continue
		}
		c.AllowCIDRs = append(c.AllowCIDRs, pfx)
	}

	for i, s := range n.DNS.Servers {
		field := fmt.Sprintf("network.dns.servers[%d]", i)
		ap, err := parseDNSServer(s)
		if err != nil {
			at(field, "%v", err)
			continue
		}
		c.DNSServers = append(c.DNSServers, ap)
	}
}

func parseDNSServer(s string) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap, nil
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return netip.AddrPortFrom(a, 53), nil
	}
	return netip.AddrPort{}, fmt.Errorf("%q is not an IP address or IP:port (e.g. 192.0.2.53 or [2001:db8::53]:53)", s)
}

func (c *Config) compileLog(l fileLog, at reporter) {
	c.LogLevel = zerolog.InfoLevel
	if l.Level == "" {
		return
	}
	lvl, err := zerolog.ParseLevel(strings.ToLower(l.Level))
	if err != nil {
		at("log.level", "%q is not a level; use debug, info, warn or error", l.Level)
		return
	}
	c.LogLevel = lvl
}

var (
	yamlLine = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)
	// yamlTypeNames turns the Go types in yaml.v3's messages into words.
	yamlTypeNames = strings.NewReplacer(
		"!!", "",
		"[]config.fileEntry", "a list of entries ({domain: ...})",
		"[]string", "a list of strings",
		"into string", "into a string",
		"into bool", "into true/false",
	)
	yamlStructName = regexp.MustCompile(`config\.file\w+`)
)

// yamlErrors turns yaml.v3's messages ("yaml: line 3: ...", or a list of
// "line 3: cannot unmarshal ...") into Errors with lines.
func yamlErrors(file string, err error) Errors {
	var te *yaml.TypeError
	msgs := []string{err.Error()}
	if errors.As(err, &te) {
		msgs = te.Errors
	}
	var errs Errors
	for _, m := range msgs {
		e := &Error{File: file, Msg: m}
		if sm := yamlLine.FindStringSubmatch(strings.TrimSpace(m)); sm != nil {
			e.Line, _ = strconv.Atoi(sm[1])
			e.Msg = yamlStructName.ReplaceAllString(yamlTypeNames.Replace(sm[2]), "a mapping (key: value)")
		}
		errs = append(errs, e)
	}
	return errs
}
