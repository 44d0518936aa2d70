package proxy

import (
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Field names of the decision line, defined once (SPEC §3).
const (
	fieldClient      = "client"
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
)

// Modes of the decision line.
const (
	modeHTTP   = "http"
	modeTunnel = "tunnel"
	modeMITM   = "mitm"
)

// decision is the state of one request or tunnel, carried from its first byte
// to its one log line.
type decision struct {
	start    time.Time
	client   string
	method   string
	mode     string
	host     string
	port     uint16
	entry    string
	sni      string
	upstream netip.AddrPort
	injected []string

	transparent bool // arrived on the transparent listener

	denial *denial // nil: allowed
	status int

	mu       sync.Mutex // bytes are counted from two copy goroutines
	bytesIn  int64      // from the client
	bytesOut int64      // to the client

	once sync.Once
}

func newDecision(client, mode string) *decision {
	return &decision{start: time.Now(), client: client, mode: mode}
}

func (d *decision) addIn(n int64) {
	d.mu.Lock()
	d.bytesIn += n
	d.mu.Unlock()
}

func (d *decision) addOut(n int64) {
	d.mu.Lock()
	d.bytesOut += n
	d.mu.Unlock()
}

// setUpstream records the address a connection was dialled to.
func (d *decision) setUpstream(c net.Conn) {
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		d.upstream = ap
	}
}

// refuse records a denial; the first one wins.
func (d *decision) refuse(den *denial) {
	if d.denial == nil {
		d.denial = den
		d.status = den.status
	}
}

// Record is one decision as the observers (metrics, the admin API's ring of
// recent decisions) see it; the decision line carries the same fields.
type Record struct {
	Time        time.Time `json:"time"`
	Client      string    `json:"client"`
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
	Injected    []string  `json:"injected,omitempty"`
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
		Time: d.start, Client: d.client, Mode: d.mode, Transparent: d.transparent,
		Host: d.host, Port: d.port, Method: d.method, Verdict: "allow", Entry: d.entry,
		SNI: d.sni, Status: d.status, Injected: d.injected,
		DurationMS: float64(time.Since(d.start).Microseconds()) / 1000,
	}
	if d.upstream.IsValid() {
		r.Upstream = d.upstream.String()
	}
	if d.denial != nil {
		r.Verdict, r.Code, r.Reason = "deny", d.denial.code, d.denial.reason
	}
	d.mu.Lock()
	r.BytesIn, r.BytesOut = d.bytesIn, d.bytesOut
	d.mu.Unlock()
	return r
}

// log writes the decision line and tells the observer, exactly once
// whatever calls it.
func (d *decision) log(k *sink) {
	d.once.Do(func() {
		r := k.redact.record(d.record())
		level := zerolog.InfoLevel
		if d.denial != nil && d.denial.status >= 500 {
			level = zerolog.WarnLevel
		}
		ev := k.log.WithLevel(level).
			Str(fieldClient, r.Client).
			Str(fieldMode, r.Mode).
			Str(fieldHost, r.Host).
			Uint16(fieldPort, r.Port).
			Str(fieldVerdict, r.Verdict)
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
		if len(r.Injected) > 0 {
			ev = ev.Strs(fieldInjected, r.Injected)
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
