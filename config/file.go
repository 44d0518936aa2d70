package config

// The file format: what a user writes. It is decoded strictly and then
// compiled into Config; nothing else reads these types.

type fileConfig struct {
	Listen   fileListen   `yaml:"listen"`
	Network  fileNetwork  `yaml:"network"`
	Upstream fileUpstream `yaml:"upstream"`
	Log      fileLog      `yaml:"log"`
}

type fileListen struct {
	Proxy string `yaml:"proxy"`
}

type fileNetwork struct {
	Allowlist  []fileEntry `yaml:"allowlist"`
	AllowCIDRs []string    `yaml:"allow_cidrs"`
	DNS        fileDNS     `yaml:"dns"`
}

type fileEntry struct {
	Domain string `yaml:"domain"`
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
