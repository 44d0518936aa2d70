package proxy

import (
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/hookgate/hookgate/allowlist"
)

// target is a request's destination after parsing and normalisation.
type target struct {
	host string     // normalised name or canonical IP literal
	ip   netip.Addr // valid when host is an IP literal
	port uint16
}

// authority is host:port as sent upstream (Host header, URL).
func (t target) authority(defaultPort uint16) string {
	h := t.host
	if strings.Contains(h, ":") {
		h = "[" + h + "]"
	}
	if t.port == defaultPort {
		return h
	}
	return h + ":" + strconv.Itoa(int(t.port))
}

// parseTarget validates a request target's host and port (as split by
// net/url or net.SplitHostPort). An empty port takes defaultPort; a
// defaultPort of 0 makes the port required.
func parseTarget(rawHost, rawPort string, defaultPort uint16) (target, *denial) {
	port := defaultPort
	if rawPort != "" || defaultPort == 0 {
		p, ok := parsePort(rawPort)
		if !ok {
			return target{}, badRequest(rawHost, "the port is not a number from 1 to 65535")
		}
		port = p
	}
	// The reasons quote nothing the client sent (see classifyUpstream).
	host, ip, err := allowlist.NormalizeHost(rawHost)
	if err != nil {
		return target{}, badRequest(rawHost, "the host is not a valid host name or IP address")
	}
	return target{host: host, ip: ip, port: port}, nil
}

// parsePort accepts only plain decimal digits: no sign, no spaces, no
// overflow past 65535 (a wrapped :65616 must not become :80).
func parsePort(s string) (uint16, bool) {
	if s == "" || len(s) > 5 {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return 0, false
	}
	return uint16(n), true
}

// clientAddr is the client's address for the decision line.
func clientAddr(r *http.Request) string { return r.RemoteAddr }
