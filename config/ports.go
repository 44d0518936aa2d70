package config

import (
	"fmt"
	"strings"
)

// PortError reports a port that the matched allowlist entry does not open
// (its ports: and raw_ports:).
type PortError struct {
	Host string
	Port uint16
}

func (e *PortError) Error() string {
	return fmt.Sprintf("port %d of %s is not among the ports its allowlist entry opens", e.Port, e.Host)
}

// PortAllowed reports whether the entry opens port: any port when it names
// none, else one of its ports or raw ports. A nil entry opens every port.
func (e *Entry) PortAllowed(port uint16) bool {
	if e == nil || len(e.Ports) == 0 {
		return true
	}
	return hasPort(e.Ports, port) || hasPort(e.RawPorts, port)
}

// RawPort reports whether a tunnel on port is relayed raw (raw_ports):
// no TLS required, nothing intercepted.
func (e *Entry) RawPort(port uint16) bool { return e != nil && hasPort(e.RawPorts, port) }

func hasPort(list []uint16, p uint16) bool {
	for _, q := range list {
		if q == p {
			return true
		}
	}
	return false
}

// entryPorts reads an entry's ports and raw_ports: numbers from 1 to 65535.
// Raw tunnels on "*" would open every host to any protocol, and are refused.
func entryPorts(e fileEntry, field string, r *reporter) (ports, raw []uint16) {
	read := func(list []int, f string) []uint16 {
		var out []uint16
		for j, p := range list {
			if p < 1 || p > 65535 {
				r.at(fmt.Sprintf("%s[%d]", f, j), "%d is not a port from 1 to 65535", p)
				continue
			}
			out = append(out, uint16(p))
		}
		return out
	}
	if e.Ports != nil && len(e.Ports) == 0 {
		r.at(field+".ports", "an empty list would open no port; remove it, or list the ports")
	}
	ports = read(e.Ports, field+".ports")
	raw = read(e.RawPorts, field+".raw_ports")
	if len(raw) > 0 && strings.TrimSpace(e.Domain) == "*" {
		r.at(field+".raw_ports", `raw tunnels on "*" would let any protocol reach every host; name the hosts`)
	}
	return ports, raw
}
