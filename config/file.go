package config

import "gopkg.in/yaml.v3"

// The file format: what a user writes. It is decoded strictly and then
// compiled into Config; nothing else reads these types.
//
// A new field needs only its yaml tag here (and its compile step): before
// decoding, treeChecker checks every value against the Go type of its field
// (string, bool, integer, float, time.Duration, slice, map, struct, or a
// pointer to one, where nil means "left out"). A field whose value may take
// several shapes is a yaml.Node, which its compile step checks itself.

type fileConfig struct {
	Listen   fileListen   `yaml:"listen"`
	Network  fileNetwork  `yaml:"network"`
	Upstream fileUpstream `yaml:"upstream"`
	CA       fileCA       `yaml:"ca"`
	Admin    fileAdmin    `yaml:"admin"`
	Limits   fileLimits   `yaml:"limits"`
	Timeouts fileTimeouts `yaml:"timeouts"`
	Log      fileLog      `yaml:"log"`
	Tenants  []fileTenant `yaml:"tenants"`
	Auth     fileAuth     `yaml:"auth"`
}

type fileAdmin struct {
	TokenFile string `yaml:"token_file"`
	// Pprof serves Go's profiles under /debug/pprof/; it needs TokenFile.
	Pprof bool `yaml:"pprof"`
}

type fileLimits struct {
	MaxConnections          *int   `yaml:"max_connections"`
	MaxConnectionsPerClient *int   `yaml:"max_connections_per_client"`
	ShutdownGrace           string `yaml:"shutdown_grace"`
}

type fileCA struct {
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

type fileListen struct {
	Proxy       *string `yaml:"proxy"`
	Transparent string  `yaml:"transparent"`
	DNS         string  `yaml:"dns"`
	Admin       *string `yaml:"admin"`
	// ProxyTLS makes the explicit listener speak TLS and ask for client
	// certificates.
	ProxyTLS fileProxyTLS `yaml:"proxy_tls"`
}

type fileProxyTLS struct {
	CertFile     string `yaml:"cert_file"`
	KeyFile      string `yaml:"key_file"`
	ClientCAFile string `yaml:"client_ca_file"`
}

type fileNetwork struct {
	Allowlist  []fileEntry `yaml:"allowlist"`
	AllowCIDRs []string    `yaml:"allow_cidrs"`
	DNS        fileDNS     `yaml:"dns"`
	// Mode is enforce (the default) or report; see compileMode.
	Mode string `yaml:"mode"`
}

type fileEntry struct {
	Domain string `yaml:"domain"`
	// Transform is a map of header: value, or a list of such maps; kept as a
	// node for its lines and order.
	Transform      yaml.Node `yaml:"transform"`
	AllowPlaintext bool      `yaml:"allow_plaintext"`
	// Timeouts override the top-level ones for this entry.
	Timeouts fileEntryTimeouts `yaml:"timeouts"`
	// Addresses are CIDRs the entry's hosts must resolve into.
	Addresses []string `yaml:"addresses"`
	// Basic sets Authorization: Basic from a username and a password.
	Basic *fileBasic `yaml:"basic"`
	// Query is a map of parameter: value set on every request; kept as a
	// node for its lines and order.
	Query yaml.Node `yaml:"query"`
	// Match scopes the entry's credentials to methods and paths; Scope
	// "strict" refuses what does not match instead of sending it bare.
	Match *fileMatch `yaml:"match"`
	Scope string     `yaml:"scope"`
	// OAuth2 fetches a client-credentials token and sends it as a bearer.
	OAuth2 *fileOAuth2 `yaml:"oauth2"`
	// AWSSigV4 signs each request with AWS Signature Version 4.
	AWSSigV4 *fileSigV4 `yaml:"aws_sigv4"`
	// Ports, if set, are the only ports the entry opens; RawPorts are
	// ports it opens as raw (non-TLS) tunnels, such as 22 for SSH.
	Ports    []int `yaml:"ports"`
	RawPorts []int `yaml:"raw_ports"`
}

type fileSigV4 struct {
	Region          string `yaml:"region"`
	Service         string `yaml:"service"`
	AccessKeyID     string `yaml:"access_key_id"`
	SecretAccessKey string `yaml:"secret_access_key"`
	SessionToken    string `yaml:"session_token"`
}

type fileOAuth2 struct {
	TokenURL     string   `yaml:"token_url"`
	ClientID     string   `yaml:"client_id"`
	ClientSecret string   `yaml:"client_secret"`
	Scopes       []string `yaml:"scopes"`
	Audience     string   `yaml:"audience"`
}

type fileBasic struct {
	Username string `yaml:"username"`
	Password string `yaml:"password"`
}

type fileMatch struct {
	Methods []string `yaml:"methods"`
	Paths   []string `yaml:"paths"`
}

// fileTimeouts are Go duration strings ("90s", "5m"); "" keeps the default.
type fileTimeouts struct {
	Resolve        durationText `yaml:"resolve"`
	Dial           durationText `yaml:"dial"`
	TLSHandshake   durationText `yaml:"tls_handshake"`
	ResponseHeader durationText `yaml:"response_header"`
	TunnelIdle     durationText `yaml:"tunnel_idle"`
}

type fileEntryTimeouts struct {
	ResponseHeader durationText `yaml:"response_header"`
}

// durationText is a duration written as a Go duration string, parsed and
// bounded by its owner; its own type lets the schema check answer a bare
// number ("10") with the unit it lacks rather than "quote it".
type durationText string

type fileDNS struct {
	Servers []string `yaml:"servers"`
	Denied  string   `yaml:"denied"`
}

type fileUpstream struct {
	CAFile string `yaml:"ca_file"`
}

type fileLog struct {
	Level string `yaml:"level"`
}
