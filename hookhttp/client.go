// Package hookhttp is the client that delivers HTTP hook events: it POSTs an
// event's JSON to a hook URL, usually through the hookgate gateway (explicit
// proxy or transparent redirect) whose CA it trusts, and classifies what
// came back so that the hook runner can tell a real answer from a failure.
//
// It is built on go-retryablehttp with the defaults that are wrong for us
// replaced: no logging to stderr, no unbounded Retry-After, no proxy taken
// silently from the environment unless asked, no redirects followed, and
// retries only on connection errors and 502/503/504, all inside the
// caller's deadline.
//
// hookhttp knows nothing about hooks.json or decisions: it returns the
// response body, and the runner parses it.
package hookhttp

import (
	"context"
	crand "crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-retryablehttp"
	"github.com/hookgate/hookgate/internal/roots"
	"golang.org/x/net/http/httpproxy"
)

// Defaults used when the corresponding Options field is zero.
const (
	DefaultMaxBody      = 1 << 20 // bytes of response body read
	DefaultMaxRetries   = 2
	DefaultRetryWaitMin = 100 * time.Millisecond
	DefaultRetryWaitMax = 1 * time.Second
)

// Kind classifies a failed delivery. The values double as the hook runner's
// outcome names.
type Kind string

const (
	// KindTimeout: the deadline passed before a complete response arrived.
	KindTimeout Kind = "timeout"
	// KindConnect: no HTTP response at all (refused, reset, DNS, TLS
	// verification, proxy refused the CONNECT, ...).
	KindConnect Kind = "connect-error"
	// KindStatus: a response whose status is not 2xx (3xx included:
	// redirects are never followed).
	KindStatus Kind = "http-status"
	// KindBadResponse: a 2xx whose body could not be read or exceeds the cap.
	KindBadResponse Kind = "bad-response"
)

// Error is a failed delivery.
type Error struct {
	Kind     Kind
	Status   int    // HTTP status for KindStatus (and KindBadResponse), else 0
	Detail   string // human-readable cause, no secrets
	Attempts int
	Err      error // underlying error, if any
}

func (e *Error) Error() string { return string(e.Kind) + ": " + e.Detail }
func (e *Error) Unwrap() error { return e.Err }

// Response is a successful (2xx) delivery.
type Response struct {
	Status   int
	Body     []byte // at most MaxBody bytes
	Attempts int
}

// Options configure a Client. Every field is optional.
type Options struct {
	// Version is sent as User-Agent "hookgate/<Version>". If empty, "devel".
	Version string
	// Proxy is the proxy URL (the gateway's explicit listener, e.g.
	// "http://10.0.0.1:3128"). If empty, HTTPS_PROXY / https_proxy and
	// NO_PROXY are read from Getenv when the Client is built (requests to
	// loopback are then never proxied); if those are empty too, requests
	// go direct (the transparent mode).
	Proxy string
	// CAFile names a PEM file of extra trusted CAs (the gateway's CA),
	// trusted in addition to the system roots.
	CAFile string
	// Getenv reads the environment. If nil, os.Getenv.
	Getenv func(string) string
	// MaxBody caps the response body. If zero, DefaultMaxBody.
	MaxBody int64
	// MaxRetries is the number of retries after the first attempt. If zero,
	// DefaultMaxRetries; negative means no retries.
	MaxRetries int
	// RetryWaitMin and RetryWaitMax bound the exponential backoff between
	// attempts. If zero, DefaultRetryWaitMin and DefaultRetryWaitMax.
	RetryWaitMin, RetryWaitMax time.Duration
}

// Client posts hook events. It is safe for concurrent use. Call Close when
// done to release idle connections.
type Client struct {
	rc        *retryablehttp.Client
	hc        *http.Client
	userAgent string
	maxBody   int64
}

// New builds a Client. It fails when the proxy URL is malformed or the CA
// file cannot be read or holds no certificate.
func New(opts Options) (*Client, error) {
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	pool := roots.System()
	if err := roots.AddFile(pool, opts.CAFile); err != nil {
		return nil, fmt.Errorf("hookhttp: ca file: %w", err)
	}

	var proxy func(*http.Request) (*url.URL, error)
	if opts.Proxy != "" {
		u, err := parseProxy(opts.Proxy)
		if err != nil {
			return nil, err
		}
		proxy = http.ProxyURL(u)
	} else {
		cfg := httpproxy.Config{
			HTTPSProxy: firstNonEmpty(getenv("HTTPS_PROXY"), getenv("https_proxy")),
			NoProxy:    firstNonEmpty(getenv("NO_PROXY"), getenv("no_proxy")),
		}
		if cfg.HTTPSProxy != "" {
			if _, err := parseProxy(cfg.HTTPSProxy); err != nil {
				return nil, fmt.Errorf("HTTPS_PROXY: %w", err)
			}
			pf := cfg.ProxyFunc()
			proxy = func(r *http.Request) (*url.URL, error) { return pf(r.URL) }
		}
	}

	tr := &http.Transport{
		Proxy:                 proxy,
		DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:       &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:   10 * time.Second,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       60 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	hc := &http.Client{
		Transport: tr,
		// Never follow a redirect: it would replay the event body to a
		// place nobody configured. A 3xx is an http-status outcome.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}

	c := &Client{
		hc:        hc,
		userAgent: "hookgate/" + firstNonEmpty(opts.Version, "devel"),
		maxBody:   opts.MaxBody,
	}
	if c.maxBody <= 0 {
		c.maxBody = DefaultMaxBody
	}
	retries := opts.MaxRetries
	switch {
	case retries == 0:
		retries = DefaultMaxRetries
	case retries < 0:
		retries = 0
	}
	rc := &retryablehttp.Client{
		HTTPClient:   hc,
		Logger:       nil, // the runner logs one line per handler; no stderr chatter
		RetryWaitMin: orDefault(opts.RetryWaitMin, DefaultRetryWaitMin),
		RetryWaitMax: orDefault(opts.RetryWaitMax, DefaultRetryWaitMax),
		RetryMax:     retries,
		CheckRetry:   checkRetry,
		Backoff:      backoff,
		ErrorHandler: retryablehttp.PassthroughErrorHandler,
		RequestLogHook: func(_ retryablehttp.Logger, r *http.Request, _ int) {
			if n, ok := r.Context().Value(attemptsKey{}).(*atomic.Int32); ok {
				n.Add(1)
			}
		},
	}
	c.rc = rc
	return c, nil
}

// Close releases idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

type attemptsKey struct{}

// Post delivers body to rawURL as application/json with the given headers
// and Idempotency-Key (the same on every retry). It returns within timeout
// (when positive) or ctx's deadline, whichever comes first.
func (c *Client) Post(ctx context.Context, rawURL string, headers map[string]string, idempotencyKey string, body []byte, timeout time.Duration) (*Response, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	attempts := new(atomic.Int32)
	ctx = context.WithValue(ctx, attemptsKey{}, attempts)

	req, err := retryablehttp.NewRequestWithContext(ctx, http.MethodPost, rawURL, body)
	if err != nil {
		return nil, &Error{Kind: KindConnect, Detail: "bad request: " + err.Error(), Err: err}
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.userAgent)
	if idempotencyKey != "" {
		req.Header.Set("Idempotency-Key", idempotencyKey)
	}

	resp, err := c.rc.Do(req)
	n := int(attempts.Load())
	if err != nil {
		if resp != nil {
			resp.Body.Close()
		}
		return nil, classifyErr(ctx, err, n)
	}
	defer resp.Body.Close()

	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		detail := fmt.Sprintf("status %d", resp.StatusCode)
		if resp.StatusCode >= 300 && resp.StatusCode < 400 {
			detail += " (redirect not followed"
			if loc := resp.Header.Get("Location"); loc != "" {
				detail += ", location " + truncate(loc, 200)
			}
			detail += ")"
		}
		if reason := resp.Header.Get("X-Proxy-Error"); reason != "" {
			detail += " (gateway: " + truncate(reason, 100) + ")"
		}
		// Drain a little so the connection can be reused; bounded.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return nil, &Error{Kind: KindStatus, Status: resp.StatusCode, Detail: detail, Attempts: n}
	}

	data, err := io.ReadAll(io.LimitReader(resp.Body, c.maxBody+1))
	if err != nil {
		if ctx.Err() != nil {
			return nil, &Error{Kind: KindTimeout, Status: resp.StatusCode, Detail: "timed out reading the response body", Attempts: n, Err: err}
		}
		return nil, &Error{Kind: KindBadResponse, Status: resp.StatusCode, Detail: "reading body: " + err.Error(), Attempts: n, Err: err}
	}
	if int64(len(data)) > c.maxBody {
		return nil, &Error{Kind: KindBadResponse, Status: resp.StatusCode, Detail: fmt.Sprintf("response body exceeds %d bytes", c.maxBody), Attempts: n}
	}
	return &Response{Status: resp.StatusCode, Body: data, Attempts: n}, nil
}

func classifyErr(ctx context.Context, err error, attempts int) *Error {
	if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		detail := "deadline exceeded"
		if errors.Is(ctx.Err(), context.Canceled) {
			detail = "canceled"
		}
		return &Error{Kind: KindTimeout, Detail: detail, Attempts: attempts, Err: err}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return &Error{Kind: KindTimeout, Detail: trimURLErr(err), Attempts: attempts, Err: err}
	}
	return &Error{Kind: KindConnect, Detail: trimURLErr(err), Attempts: attempts, Err: err}
}

// trimURLErr drops url.Error's `Post "https://...":` prefix, which repeats
// what the log line already says.
func trimURLErr(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return truncate(ue.Err.Error(), 300)
	}
	return truncate(err.Error(), 300)
}

// checkRetry retries only on connection errors and 502/503/504, and only
// while a retry can still finish inside the deadline.
func checkRetry(ctx context.Context, resp *http.Response, err error) (bool, error) {
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	if err != nil {
		return isConnectionError(err), nil
	}
	switch resp.StatusCode {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
	default:
		return false, nil
	}
	if d, ok := retryAfter(resp); ok {
		if dl, has := ctx.Deadline(); has && time.Until(dl) <= d {
			// Honouring Retry-After would overrun the deadline: stop now
			// and report the status rather than time out later.
			return false, nil
		}
	}
	return true, nil
}

// isConnectionError reports whether err means no response was obtained for
// a reason a retry may fix: refused, reset, closed before an answer.
// Certificate errors and malformed URLs are not retried.
func isConnectionError(err error) bool {
	var certErr *tls.CertificateVerificationError
	var unknownAuth x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	if errors.As(err, &certErr) || errors.As(err, &unknownAuth) || errors.As(err, &hostErr) {
		return false
	}
	var recErr tls.RecordHeaderError
	if errors.As(err, &recErr) {
		return false
	}
	switch {
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.ECONNABORTED), errors.Is(err, syscall.EPIPE),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return true
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return false
}

// retryAfter parses Retry-After as seconds or an HTTP date.
func retryAfter(resp *http.Response) (time.Duration, bool) {
	if resp == nil {
		return 0, false
	}
	v := strings.TrimSpace(resp.Header.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		d := time.Until(t)
		if d < 0 {
			d = 0
		}
		return d, true
	}
	return 0, false
}

// backoff is capped exponential backoff with jitter; a Retry-After that
// checkRetry accepted (it fits the deadline) is used as is.
func backoff(lo, hi time.Duration, attempt int, resp *http.Response) time.Duration {
	if d, ok := retryAfter(resp); ok {
		return d
	}
	d := lo << min(attempt, 16)
	if d <= 0 || d > hi {
		d = hi
	}
	// Full jitter in [d/2, d].
	return d/2 + rand.N(d/2+1)
}

func parseProxy(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		// Accept "host:port" as curl does.
		u2, err2 := url.Parse("http://" + s)
		if err2 != nil || u2.Host == "" {
			// Not quoted: a proxy URL may carry the sandbox's proxy
			// credentials (http://tenant:password@gateway:3128).
			return nil, fmt.Errorf("hookhttp: the proxy URL cannot be parsed")
		}
		return u2, nil
	}
	switch u.Scheme {
	case "http", "https", "socks5", "socks5h":
		return u, nil
	}
	return nil, fmt.Errorf("hookhttp: proxy URL %q: unsupported scheme %q", u.Redacted(), u.Scheme)
}

func firstNonEmpty(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// PostAnswer is Post for a question that wants an answer body: it sends a
// fresh Idempotency-Key and returns the body, or nil and the Kind of the
// failure as a word. Its signature is the one a policy approver is asked
// through (policy.ApproverPost), so the policy package needs no HTTP stack.
func (c *Client) PostAnswer(ctx context.Context, rawURL string, headers map[string]string, body []byte, timeout time.Duration) ([]byte, string) {
	var key [16]byte
	_, _ = crand.Read(key[:])
	resp, err := c.Post(ctx, rawURL, headers, hex.EncodeToString(key[:]), body, timeout)
	if err != nil {
		var he *Error
		if errors.As(err, &he) {
			return nil, string(he.Kind)
		}
		return nil, string(KindConnect)
	}
	return resp.Body, ""
}
