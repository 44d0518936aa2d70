package proxy

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// Field names of the decision line, defined once (README, "The decision
// line").
const (
	fieldClient      = "client"
	fieldTenant      = "tenant"
	fieldHost        = "host"
	fieldPort        = "port"
	fieldMode        = "mode"
	fieldVerdict     = "verdict"
	fieldReason      = "reason"
	fieldCode        = "code"
	fieldStatus      = "status"
	fieldEntry       = "entry"
	fieldSNI         = "sni"
	fieldUpstream    = "upstream"
	fieldBytesIn     = "bytes_in"
	fieldBytesOut    = "bytes_out"
	fieldDuration    = "duration_ms"
	fieldInjected    = "injected"
	fieldMethod      = "method"
	fieldTransparent = "transparent"
	fieldTLSAlert    = "tls_alert"
	fieldGeneration  = "generation"
)

// Verdicts of the decision line and of the metrics' verdict label.
const (
	// VerdictAllow: the request or tunnel was let through and ended well.
	VerdictAllow = "allow"
	// VerdictDeny: the policy (allowlist, address policy, binding checks,
	// malformed-input rules, limits) refused it.
	VerdictDeny = "deny"
	// VerdictError: it was not refused, but failed: the upstream could not
	// be reached or broke off, or the client sent too much, too slowly, or
	// went away mid-request. Its code says which side.
	VerdictError = "error"
	// VerdictWouldDeny: the allowlist denies it, but the policy is in
	// report mode, so it was let through (see judge).
	VerdictWouldDeny = "would-deny"
)

// Codes of failures on the client's side. They never reach the client as
// X-Proxy-Error (net/http answers, or nothing is answered); they are logged.
const (
	// CodeClientHeaderTooLarge: the request header block exceeded the
	// limit; net/http answered 431.
	CodeClientHeaderTooLarge Code = "client-header-too-large"
	// CodeClientTimeout: the request header did not arrive within the
	// header read timeout (a slowloris client); the connection was closed.
	CodeClientTimeout Code = "client-timeout"
	// CodeClientClosed: the client went away before its request was
	// answered: in the middle of its header, or while the upstream was
	// still working on it.
	CodeClientClosed Code = "client-closed"
)

// verdictOf tells a failure from a refusal by its code: the upstream-* and
// client-* codes are failures of one side, every other code is a decision
// of the policy.
func verdictOf(c Code) string {
	if strings.HasPrefix(string(c), "upstream-") || strings.HasPrefix(string(c), "client-") {
		return VerdictError
	}
	return VerdictDeny
}

// TLS alerts the gateway sends on a tunnel after its 200, named in the
// decision line's tls_alert field.
const (
	// alertAccessDenied (49) answers a refusal: the policy said no.
	alertAccessDenied = "access_denied"
	// alertInternalError (80) answers a failure that is neither the
	// client's nor the policy's: the upstream could not be reached. It
	// does not read as a block.
	alertInternalError = "internal_error"
)

// tlsAlertInternalError is a fatal TLS alert record (internal_error, 80),
// framed like tlsAlertAccessDenied.
const tlsAlertInternalError = "\x15\x03\x03\x00\x02\x02\x50"

// sendAlert writes a fatal TLS alert to a tunnel's client and records it
// on the decision line.
func (d *decision) sendAlert(c net.Conn, name string) {
	record := tlsAlertAccessDenied
	if name == alertInternalError {
		record = tlsAlertInternalError
	}
	_, _ = c.Write([]byte(record))
	d.alert = name
}

// alertFor picks the alert for a tunnel that cannot go on: access_denied
// for a refusal, internal_error for a failure.
func alertFor(den *denial) string {
	if verdictOf(den.code) == VerdictError {
		return alertInternalError
	}
	return alertAccessDenied
}

// Modes of the decision line.
const (
	modeHTTP   = "http"
	modeTunnel = "tunnel"
	modeMITM   = "mitm"
)

// decision is the state of one request or tunnel, carried from its first byte
// to its one log line. Its owner — the handler of the request, the session
// of the tunnel — finishes it once (finish), which writes the line to the
// decision's sink. A tunnel whose bytes become requests of their own
// (interception, transparent plain HTTP) hands its line off to them
// (handOff): each of those requests is then a decision with a line of its
// own, and the tunnel's finish writes nothing.
type decision struct {
	sink     *sink
	start    time.Time
	client   string
	tenant   string // the tenant the client was recognised as; "" for none
	method   string
	mode     string
	host     string
	port     uint16
	entry    string
	sni      string
	upstream netip.AddrPort
	injected []string

	transparent bool // arrived on the transparent listener

	// account, for a tenant with limits, counts its bytes; holdsConn:
	// the decision holds one of the tenant's connections until finish.
	account   *tenantAccount
	holdsConn bool

	denial *denial // nil: allowed
	status int
	alert  string // the TLS alert the client was sent, if any

	generation uint64  // of the policy that judged it; 0: not judged
	wouldDeny  *denial // the allowlist's refusal that report mode waived

	// mu guards the bytes, counted from two copy goroutines, and the
	// denial, which a failing copy may record.
	mu       sync.Mutex
	bytesIn  int64 // from the client
	bytesOut int64 // to the client

	handedOff atomic.Bool
	once      sync.Once
}

func newDecision(k *sink, client, mode string) *decision {
	return &decision{sink: k, start: time.Now(), client: client, mode: mode}
}

// handOff says that the requests this tunnel became carry its story, each
// on a line of its own (or that a line written for a request net/http
// ended itself stands for it): finish writes no line of its own.
func (d *decision) handOff() { d.handedOff.Store(true) }

func (d *decision) addIn(n int64) {
	d.mu.Lock()
	d.bytesIn += n
	d.mu.Unlock()
	d.account.addBytes(n)
}

func (d *decision) addOut(n int64) {
	d.mu.Lock()
	d.bytesOut += n
	d.mu.Unlock()
	d.account.addBytes(n)
}

// setUpstream records the address a connection was dialled to.
func (d *decision) setUpstream(c net.Conn) {
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		ap := ta.AddrPort()
		d.upstream = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
		return
	}
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		d.upstream = ap
	}
}

// refuse records a denial; the first one wins.
func (d *decision) refuse(den *denial) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.denial == nil {
		d.denial = den
		d.status = den.status
	}
}

// fail records a failure that came after the status was sent (a response
// body or a tunnel that broke off): the client saw the status, so it stays;
// the verdict becomes error. A refusal or failure recorded before wins.
func (d *decision) fail(den *denial) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.denial == nil {
		d.denial = den
	}
}

// requestFailure is what a request that got no response is recorded as:
// the client going away (its request context was cancelled), or an
// upstream failure as classifyUpstream names it.
func requestFailure(err error, r *http.Request, host string) *denial {
	if errors.Is(err, context.Canceled) && r != nil && r.Context().Err() != nil {
		return deny(CodeClientClosed, 0, host, "the client went away before the upstream answered")
	}
	return classifyUpstream(err, host)
}

// bodyFailure is what a response body that broke off mid-way is recorded
// as: the client going away (its request context was cancelled), or an
// upstream failure.
func bodyFailure(err error, host string) *denial {
	if errors.Is(err, context.Canceled) {
		return deny(CodeClientClosed, 0, host, "the client went away during the response body")
	}
	return brokeOff(err, host, "the response body broke off after the status was sent")
}

// brokeOff records an upstream failure after the status was sent, as
// classifyUpstream names it, saying what broke off.
func brokeOff(err error, host, what string) *denial {
	den := *classifyUpstream(err, host)
	den.reason = what + ": " + den.reason
	return &den
}

// Record is one decision as the observers (metrics, the admin API's ring of
// recent decisions) see it; the decision line carries the same fields.
type Record struct {
	Time        time.Time `json:"time"`
	Client      string    `json:"client"`
	Tenant      string    `json:"tenant,omitempty"`
	Mode        string    `json:"mode"`
	Transparent bool      `json:"transparent,omitempty"`
	Host        string    `json:"host"`
	Port        uint16    `json:"port"`
	Method      string    `json:"method,omitempty"`
	Verdict     string    `json:"verdict"`
	Code        Code      `json:"code,omitempty"`
	Reason      string    `json:"reason,omitempty"`
	Entry       string    `json:"entry,omitempty"`
	SNI         string    `json:"sni,omitempty"`
	Upstream    string    `json:"upstream,omitempty"`
	Status      int       `json:"status,omitempty"`
	TLSAlert    string    `json:"tls_alert,omitempty"`
	Injected    []string  `json:"injected,omitempty"`
	Generation  uint64    `json:"generation,omitempty"`
	BytesIn     int64     `json:"bytes_in"`
	BytesOut    int64     `json:"bytes_out"`
	DurationMS  float64   `json:"duration_ms"`
}

// Observer receives what the gateway decides and does, for metrics and the
// admin API. Every field is optional; the functions must be cheap and safe
// for concurrent use.
type Observer struct {
	// Decision gets every decision, when its line is written.
	Decision func(Record)
	// Tunnel gets +1 when a hijacked or transparent connection starts and
	// -1 when it ends.
	Tunnel func(delta int)
	// Limited gets the code of every connection a limit refused.
	Limited func(Code)
	// Connection gets +1 when a client connection is let in (on either
	// listener) and -1 when it is closed.
	Connection func(delta int)
}

// sink is where decisions go: the log and the observer, both through the
// redactor.
type sink struct {
	log      zerolog.Logger
	observer Observer
	redact   *redactor // nil: nothing to scrub
}

func (d *decision) record() Record {
	r := Record{
		Time: d.start, Client: d.client, Tenant: d.tenant, Mode: d.mode, Transparent: d.transparent,
		Host: d.host, Port: d.port, Method: d.method, Verdict: VerdictAllow, Entry: d.entry,
		SNI: d.sni, TLSAlert: d.alert, Injected: d.injected, Generation: d.generation,
		DurationMS: durationMS(time.Since(d.start)),
	}
	if d.upstream.IsValid() {
		r.Upstream = d.upstream.String()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	r.Status = d.status
	switch {
	case d.denial != nil:
		r.Verdict, r.Code, r.Reason = verdictOf(d.denial.code), d.denial.code, d.denial.reason
	case d.wouldDeny != nil:
		r.Verdict, r.Code, r.Reason = VerdictWouldDeny, d.wouldDeny.code, d.wouldDeny.reason
	}
	r.BytesIn, r.BytesOut = d.bytesIn, d.bytesOut
	return r
}

// durationMS is how every duration is logged: milliseconds, as a number
// with microsecond precision, in a field whose name ends in _ms.
func durationMS(d time.Duration) float64 {
	return float64(d.Microseconds()) / 1000
}

// answer refuses a request before anything was sent upstream: the denial
// recorded, written to the client, and the decision finished.
func (d *decision) answer(w http.ResponseWriter, den *denial) {
	d.refuse(den)
	den.write(w)
	d.finish()
}

// finish writes the decision line and tells the observer, once whatever
// calls it; nothing if the decision was handed off.
func (d *decision) finish() {
	d.once.Do(func() {
		if d.holdsConn {
			d.account.tl.release(d.account.tenant)
		}
		if d.handedOff.Load() {
			return
		}
		k := d.sink
		r := k.redact.record(d.record())
		level := zerolog.InfoLevel
		if r.Verdict == VerdictError || (r.Verdict == VerdictDeny && r.Status >= 500) {
			level = zerolog.WarnLevel
		}
		ev := k.log.WithLevel(level).
			Str(fieldClient, r.Client).
			Str(fieldMode, r.Mode).
			Str(fieldHost, r.Host).
			Uint16(fieldPort, r.Port).
			Str(fieldVerdict, r.Verdict)
		if r.Tenant != "" {
			ev = ev.Str(fieldTenant, r.Tenant)
		}
		if r.Transparent {
			ev = ev.Bool(fieldTransparent, true)
		}
		if r.Method != "" {
			ev = ev.Str(fieldMethod, r.Method)
		}
		if r.Entry != "" {
			ev = ev.Str(fieldEntry, r.Entry)
		}
		if r.SNI != "" {
			ev = ev.Str(fieldSNI, r.SNI)
		}
		if r.Upstream != "" {
			ev = ev.Str(fieldUpstream, r.Upstream)
		}
		if r.Code != "" {
			ev = ev.Str(fieldCode, string(r.Code)).Str(fieldReason, r.Reason)
		}
		if r.Status != 0 {
			ev = ev.Int(fieldStatus, r.Status)
		}
		if r.TLSAlert != "" {
			ev = ev.Str(fieldTLSAlert, r.TLSAlert)
		}
		if len(r.Injected) > 0 {
			ev = ev.Strs(fieldInjected, r.Injected)
		}
		if r.Generation != 0 {
			ev = ev.Uint64(fieldGeneration, r.Generation)
		}
		ev.Int64(fieldBytesIn, r.BytesIn).
			Int64(fieldBytesOut, r.BytesOut).
			Float64(fieldDuration, r.DurationMS).
			Msg("decision")
		if k.observer.Decision != nil {
			k.observer.Decision(r)
		}
	})
}
