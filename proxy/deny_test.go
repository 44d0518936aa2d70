package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/textproto"
	"strings"
	"syscall"
	"testing"

	"github.com/hookgate/hookgate/allowlist"
	"github.com/hookgate/hookgate/config"
)

// TestClassifyUpstream: every error class maps to its status, code and a
// reason of our own words; errors whose text quotes a peer's bytes (here
// the marker) never lend that text to the reason.
func TestClassifyUpstream(t *testing.T) {
	const marker = "PEERBYTES-7c1d"
	host := "api.example.com"
	hostnameErr := x509.HostnameError{Certificate: &x509.Certificate{DNSNames: []string{marker + ".example.com"}}, Host: host}
	tests := []struct {
		name   string
		err    error
		status int
		code   Code
		reason string
	}{
		{"blocked", &allowlist.BlockedError{Host: host, Addr: netip.MustParseAddr("10.0.0.1"), Class: allowlist.ClassPrivate},
			403, CodeAddressPolicy, "api.example.com resolves to 10.0.0.1, which is a private address"},
		{"pinned", &config.PinnedError{Host: host, Addr: netip.MustParseAddr("192.0.2.7")},
			403, CodeAddressPolicy, "api.example.com resolves to 192.0.2.7, outside the addresses its allowlist entry allows"},
		{"no such host", &ResolveError{Host: host, Err: &net.DNSError{Err: marker, Name: host, Server: marker, IsNotFound: true}},
			502, CodeUpstreamError, "api.example.com: no such host"},
		{"dns timeout", &ResolveError{Host: host, Err: &net.DNSError{Err: marker, IsTimeout: true}},
			504, CodeUpstreamTimeout, "resolving api.example.com timed out"},
		{"dns other", &ResolveError{Host: host, Err: &net.DNSError{Err: marker, Server: marker}},
			502, CodeUpstreamError, "resolving api.example.com failed"},
		{"no addresses", &ResolveError{Host: host, Err: errNoAddresses},
			502, CodeUpstreamError, "api.example.com has no addresses"},
		{"unknown authority", &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}},
			502, CodeUpstreamTLS, "the upstream's certificate is not trusted: it is signed by an unknown authority"},
		{"hostname", &tls.CertificateVerificationError{Err: hostnameErr},
			502, CodeUpstreamTLS, "the upstream's certificate is not trusted: it is not valid for api.example.com"},
		{"expired", x509.CertificateInvalidError{Reason: x509.Expired, Detail: marker},
			502, CodeUpstreamTLS, "the upstream's certificate is not trusted: it has expired or is not yet valid"},
		{"not tls", tls.RecordHeaderError{Msg: marker},
			502, CodeUpstreamTLS, "the upstream did not speak TLS"},
		{"tls alert", &net.OpError{Op: "remote error", Err: errors.New("tls: " + marker)},
			502, CodeUpstreamError, "the upstream refused the TLS handshake"},
		{"deadline", fmt.Errorf("%s: %w", marker, context.DeadlineExceeded),
			504, CodeUpstreamTimeout, "the upstream did not answer in time"},
		{"refused", &net.OpError{Op: "dial", Err: &netSyscallError{syscall.ECONNREFUSED}},
			502, CodeUpstreamError, "connecting to the upstream: connection refused"},
		{"reset", &net.OpError{Op: "read", Err: &netSyscallError{syscall.ECONNRESET}},
			502, CodeUpstreamError, "talking to the upstream: connection reset by peer"},
		{"eof", &responseError{err: io.ErrUnexpectedEOF},
			502, CodeUpstreamError, "the upstream closed the connection before a complete response"},
		{"malformed status", &responseError{err: errors.New(`malformed HTTP status code "` + marker + `"`)},
			502, CodeUpstreamError, "the upstream's response is not valid HTTP/1.1"},
		{"malformed header", fmt.Errorf("net/http: transport connection broken: %w", textproto.ProtocolError("malformed MIME header line: "+marker)),
			502, CodeUpstreamError, "the upstream's response is not valid HTTP/1.1"},
		{"cancelled", fmt.Errorf("%s: %w", marker, context.Canceled),
			502, CodeUpstreamError, "the request was cancelled"},
		{"anything else", errors.New(marker),
			502, CodeUpstreamError, "the exchange with the upstream failed"},
		{"a denial", badRequest(host, "as it was"), 400, CodeBadRequest, "as it was"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := classifyUpstream(tt.err, host)
			if d.status != tt.status || d.code != tt.code || d.reason != tt.reason || d.host != host {
				t.Errorf("got %d %s %q (host %q), want %d %s %q", d.status, d.code, d.reason, d.host, tt.status, tt.code, tt.reason)
			}
			if strings.Contains(string(d.body()), marker) {
				t.Error("the answer quotes the error's text")
			}
		})
	}
}

// netSyscallError is an os.SyscallError stand-in: an errno wrapped once.
type netSyscallError struct{ errno syscall.Errno }

func (e *netSyscallError) Error() string { return "syscall: " + e.errno.Error() }
func (e *netSyscallError) Unwrap() error { return e.errno }

// TestDenyHostOnlyWhenValid: an answer names the host only when it is a
// valid, normalised one; raw client text is left out.
func TestDenyHostOnlyWhenValid(t *testing.T) {
	for raw, want := range map[string]string{
		"api.example.com":     "api.example.com",
		"API.example.com":     "",
		"a b":                 "",
		"api.example.com:443": "",
		"2001:db8::1":         "2001:db8::1",
		"":                    "",
	} {
		if got := deny(CodeBadRequest, http.StatusBadRequest, raw, "x").host; got != want {
			t.Errorf("deny host %q → %q, want %q", raw, got, want)
		}
	}
}
