// Package configs holds the example configuration files and embeds the
// gateway's built-in default, so that `gateway serve` runs with no file.
package configs

import _ "embed"

//go:embed gateway.yaml
var defaultGateway []byte

// DefaultGatewayName names the built-in default in messages.
const DefaultGatewayName = "(built-in configs/gateway.yaml)"

// DefaultGateway returns the built-in gateway configuration, a copy of
// configs/gateway.yaml.
func DefaultGateway() []byte { return append([]byte(nil), defaultGateway...) }
