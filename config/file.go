package config

import "gopkg.in/yaml.v3"

// The file format: what a user writes. It is decoded strictly and then
// compiled into Config; nothing else reads these types.

type fileConfig struct {
	Listen   fileListen   `yaml:"listen"`
	Network  fileNetwork  `yaml:"network"`
	Upstream fileUpstream `yaml:"upstream"`
	CA       fileCA       `yaml:"ca"`
	Admin    fileAdmin    `yaml:"admin"`
	Limits   fileLimits   `yaml:"limits"`
	Log      fileLog      `yaml:"log"`
}

type fileAdmin struct {
	TokenFile string `yaml:"token_file"`
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
}

type fileNetwork struct {
	Allowlist  []fileEntry `yaml:"allowlist"`
	AllowCIDRs []string    `yaml:"allow_cidrs"`
	DNS        fileDNS     `yaml:"dns"`
}

type fileEntry struct {
	Domain string `yaml:"domain"`
	// Transform is a map of header: value, or a list of such maps; kept as a
	// node for its lines and order.
	Transform      yaml.Node `yaml:"transform"`
	AllowPlaintext bool      `yaml:"allow_plaintext"`
	// Addresses are CIDRs the entry's hosts must resolve into.
	Addresses []string `yaml:"addresses"`
}

type fileDNS struct {
	Servers []string `yaml:"servers"`
}

type fileUpstream struct {
	CAFile string `yaml:"ca_file"`
}

type fileLog struct {
	Level string `yaml:"level"`
}
