package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"syscall"

	"github.com/hookgate/hookgate/allowlist"
	"github.com/hookgate/hookgate/config"
)

// Code is the machine-readable reason of a refusal, sent as X-Proxy-Error and
// as "error" in the JSON body, and logged.
type Code string

// The refusal codes the gateway answers with. Each is documented in the
// README's table of denials.
const (
	CodeAllowlist           Code = "blocked-by-allowlist"
	CodeAddressPolicy       Code = "blocked-by-address-policy"
	CodeSNIMismatch         Code = "blocked-by-sni-mismatch"
	CodeHostMismatch        Code = "blocked-by-host-mismatch"
	CodePlaintextCredential Code = "blocked-by-plaintext-credential"
	CodeProtocol            Code = "blocked-by-protocol"
	CodeBadRequest          Code = "bad-request"
	CodeUpstreamError       Code = "upstream-error"
	CodeUpstreamTimeout     Code = "upstream-timeout"
	CodeUpstreamTLS         Code = "upstream-tls-error"
)

// HeaderProxyError carries the Code of every answer the gateway makes itself.
const HeaderProxyError = "X-Proxy-Error"

// denial is a refusal or an upstream failure: what the client is told and
// what the decision line records.
type denial struct {
	code   Code
	status int
	host   string
	reason string
}

func (d *denial) Error() string { return string(d.code) + ": " + d.reason }

// deny builds a denial. host is named in the answer only when it is a
// valid host (callers may pass what the client sent, which an answer does
// not echo); format and args must not carry a peer's bytes either.
func deny(code Code, status int, host, format string, args ...any) *denial {
	if normalized, _, err := allowlist.NormalizeHost(host); err != nil || normalized != host {
		host = ""
	}
	return &denial{code: code, status: status, host: host, reason: fmt.Sprintf(format, args...)}
}

func badRequest(host, format string, args ...any) *denial {
	return deny(CodeBadRequest, http.StatusBadRequest, host, format, args...)
}

// denialBody is the JSON body of every answer the gateway makes itself.
type denialBody struct {
	Error  Code   `json:"error"`
	Host   string `json:"host,omitempty"`
	Reason string `json:"reason"`
}

func (d *denial) body() []byte {
	b, err := json.Marshal(denialBody{Error: d.code, Host: d.host, Reason: d.reason})
	if err != nil { // cannot happen for these field types
		return []byte(`{"error":"` + string(d.code) + `"}`)
	}
	return append(b, '\n')
}

// response builds the answer as an *http.Response (for goproxy handlers).
func (d *denial) response(req *http.Request) *http.Response {
	body := d.body()
	h := make(http.Header, 4)
	d.setHeaders(h, len(body))
	return &http.Response{
		Status:        strconv.Itoa(d.status) + " " + http.StatusText(d.status),
		StatusCode:    d.status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          io.NopCloser(strings.NewReader(string(body))),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}

// write sends the answer through an http.ResponseWriter.
func (d *denial) write(w http.ResponseWriter) {
	body := d.body()
	d.setHeaders(w.Header(), len(body))
	w.WriteHeader(d.status)
	_, _ = w.Write(body)
}

func (d *denial) setHeaders(h http.Header, n int) {
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(n))
	h.Set(HeaderProxyError, string(d.code))
	h.Set("Cache-Control", "no-store")
	if d.status == http.StatusBadRequest {
		h.Set("Connection", "close")
	}
	if d.status == http.StatusProxyAuthRequired {
		h["Proxy-Authenticate"] = append([]string(nil), proxyAuthChallenges...)
	}
}

// classifyUpstream maps an error met while resolving, dialling or talking to
// the upstream to what the client is told: status, code and reason. It is
// the one place that decides them for errors.
//
// A reason names the class of the error (from errors.Is and errors.As),
// never the error's own text: a parse error quotes the bytes it could not
// parse, and those came from the upstream — an upstream that answers
// "HTTP/1.1 200 OK\r\nX-Echo Bearer <token>\r\n" must not get the token it
// was sent into the client's answer, the decision line or the admin API.
// Only our own errors (the policy's, ResolveError: host names we
// normalised, addresses we resolved) and fixed texts (errno names, TLS
// alert names) are quoted.
func classifyUpstream(err error, host string) *denial {
	var (
		d         *denial
		refused   *config.NotAllowedError
		port      *config.PortError
		localhost *config.LocalhostError
		blocked   *allowlist.BlockedError
		pinned    *config.PinnedError
		resolve   *ResolveError
		recErr    tls.RecordHeaderError
	)
	switch {
	case errors.As(err, &d):
		return d
	case errors.As(err, &refused):
		return deny(CodeAllowlist, http.StatusForbidden, host, "%s", refused.Error())
	case errors.As(err, &port):
		return deny(CodeAllowlist, http.StatusForbidden, host, "%s", port.Error())
	case errors.As(err, &localhost):
		return deny(CodeAddressPolicy, http.StatusForbidden, host, "%s", localhost.Error())
	case errors.As(err, &blocked):
		return deny(CodeAddressPolicy, http.StatusForbidden, host, "%s", blocked.Error())
	case errors.As(err, &pinned):
		return deny(CodeAddressPolicy, http.StatusForbidden, host, "%s", pinned.Error())
	case errors.As(err, &resolve):
		return resolveDenial(resolve, host)
	case isCertificateError(err):
		return deny(CodeUpstreamTLS, http.StatusBadGateway, host, "the upstream's certificate is not trusted: %s", certReason(err, host))
	case errors.As(err, &recErr):
		return deny(CodeUpstreamTLS, http.StatusBadGateway, host, "the upstream did not speak TLS")
	case isTimeout(err):
		return deny(CodeUpstreamTimeout, http.StatusGatewayTimeout, host, "the upstream did not answer in time")
	}
	return deny(CodeUpstreamError, http.StatusBadGateway, host, "%s", upstreamReason(err))
}

func isTimeout(err error) bool {
	var netErr net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &netErr) && netErr.Timeout()
}

// resolveDenial: a lookup that failed. The resolver's own message may carry
// what a DNS server answered; the reason names the class only.
func resolveDenial(e *ResolveError, host string) *denial {
	var dnsErr *net.DNSError
	switch {
	case isTimeout(e.Err) || errors.As(e.Err, &dnsErr) && dnsErr.IsTimeout:
		return deny(CodeUpstreamTimeout, http.StatusGatewayTimeout, host, "resolving %s timed out", host)
	case errors.As(e.Err, &dnsErr) && dnsErr.IsNotFound:
		return deny(CodeUpstreamError, http.StatusBadGateway, host, "%s: no such host", host)
	case errors.Is(e.Err, errNoAddresses):
		return deny(CodeUpstreamError, http.StatusBadGateway, host, "%s has no addresses", host)
	}
	return deny(CodeUpstreamError, http.StatusBadGateway, host, "resolving %s failed", host)
}

func isCertificateError(err error) bool {
	var (
		verify   *tls.CertificateVerificationError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
	)
	return errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &hostname) || errors.As(err, &invalid)
}

// certReason names what is wrong with the upstream's certificate. The x509
// errors' own texts list the certificate's names, which the upstream chose.
func certReason(err error, host string) string {
	var (
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
	)
	switch {
	case errors.As(err, &unknown):
		return "it is signed by an unknown authority"
	case errors.As(err, &hostname):
		return "it is not valid for " + host
	case errors.As(err, &invalid):
		switch invalid.Reason {
		case x509.Expired:
			return "it has expired or is not yet valid"
		case x509.NotAuthorizedToSign:
			return "it was signed by a certificate that may not sign others"
		case x509.IncompatibleUsage:
			return "its key usage does not allow TLS server authentication"
		case x509.NameConstraintsWithoutSANs, x509.CANotAuthorizedForThisName, x509.CANotAuthorizedForExtKeyUsage:
			return "its issuer is not authorised for it"
		}
		return "it is invalid"
	}
	return "verification failed"
}

// responseError is a failure to read an upstream's response header: the
// response was malformed, truncated, or late. The wrapped error quotes the
// upstream's bytes; classifyUpstream never prints it.
type responseError struct{ err error }

func (e *responseError) Error() string { return "reading the upstream's response: " + e.err.Error() }
func (e *responseError) Unwrap() error { return e.err }

// upstreamReason names the class of an upstream failure that is neither a
// policy decision, a certificate nor a timeout.
func upstreamReason(err error) string {
	var (
		respErr  *responseError
		opErr    *net.OpError
		errno    syscall.Errno
		protoErr textproto.ProtocolError
	)
	hasOp := errors.As(err, &opErr)
	switch {
	case errors.Is(err, context.Canceled):
		return "the request was cancelled"
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return "the upstream closed the connection before a complete response"
	case hasOp && opErr.Op == "remote error":
		return "the upstream refused the TLS handshake"
	case errors.As(err, &errno):
		return connPhase(opErr) + errno.Error()
	case errors.As(err, &respErr), errors.As(err, &protoErr):
		return "the upstream's response is not valid HTTP/1.1"
	case hasOp:
		return connPhase(opErr) + "the connection failed"
	}
	return "the exchange with the upstream failed"
}

// connPhase says what the gateway was doing when a connection failed.
func connPhase(opErr *net.OpError) string {
	if opErr != nil && opErr.Op == "dial" {
		return "connecting to the upstream: "
	}
	return "talking to the upstream: "
}
