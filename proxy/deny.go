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
	"strconv"
	"strings"
)

// Code is the machine-readable reason of a refusal, sent as X-Proxy-Error and
// as "error" in the JSON body, and logged.
type Code string

// The codes of SPEC §5. Each is documented in the README.
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

func deny(code Code, status int, host, format string, args ...any) *denial {
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
}

// classifyUpstream maps an error met while resolving, dialling or talking to
// the upstream to what the client is told. It is the one place that decides
// status and code for errors.
func classifyUpstream(err error, host string) *denial {
	var (
		d        *denial
		blocked  *BlockedError
		resolve  *ResolveError
		verify   *tls.CertificateVerificationError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		recErr   tls.RecordHeaderError
		netErr   net.Error
	)
	switch {
	case errors.As(err, &d):
		return d
	case errors.As(err, &blocked):
		return deny(CodeAddressPolicy, http.StatusForbidden, host, "%s", blocked.Error())
	case errors.As(err, &resolve):
		if errors.Is(err, context.DeadlineExceeded) {
			return deny(CodeUpstreamTimeout, http.StatusGatewayTimeout, host, "resolving %s timed out", host)
		}
		return deny(CodeUpstreamError, http.StatusBadGateway, host, "%s", resolve.Error())
	case errors.As(err, &verify), errors.As(err, &unknown), errors.As(err, &hostname), errors.As(err, &invalid):
		return deny(CodeUpstreamTLS, http.StatusBadGateway, host, "the upstream's certificate is not trusted: %s", tlsReason(err))
	case errors.As(err, &recErr):
		return deny(CodeUpstreamTLS, http.StatusBadGateway, host, "the upstream did not speak TLS")
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return deny(CodeUpstreamTimeout, http.StatusGatewayTimeout, host, "the upstream did not answer in time")
	}
	return deny(CodeUpstreamError, http.StatusBadGateway, host, "%s", upstreamReason(err))
}

func tlsReason(err error) string {
	var verify *tls.CertificateVerificationError
	if errors.As(err, &verify) {
		err = verify.Err
	}
	return err.Error()
}

// upstreamReason gives the innermost error text: the outer layers repeat the
// request URL, which the decision line already has.
func upstreamReason(err error) string {
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Err != nil {
		return opErr.Op + ": " + opErr.Err.Error()
	}
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err.Error()
		}
		err = next
	}
}
