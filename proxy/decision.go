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

// log writes the decision line, exactly once whatever calls it.
func (d *decision) log(l *zerolog.Logger) {
	d.once.Do(func() {
		level := zerolog.InfoLevel
		verdict := "allow"
		if d.denial != nil {
			verdict = "deny"
			if d.denial.status >= 500 {
				level = zerolog.WarnLevel
			}
		}
		ev := l.WithLevel(level).
			Str(fieldClient, d.client).
			Str(fieldMode, d.mode).
			Str(fieldHost, d.host).
			Uint16(fieldPort, d.port).
			Str(fieldVerdict, verdict)
		if d.transparent {
			ev = ev.Bool(fieldTransparent, true)
		}
		if d.method != "" {
			ev = ev.Str(fieldMethod, d.method)
		}
		if d.entry != "" {
			ev = ev.Str(fieldEntry, d.entry)
		}
		if d.sni != "" {
			ev = ev.Str(fieldSNI, d.sni)
		}
		if d.upstream.IsValid() {
			ev = ev.Str(fieldUpstream, d.upstream.String())
		}
		if d.denial != nil {
			ev = ev.Str(fieldCode, string(d.denial.code)).Str(fieldReason, d.denial.reason)
		}
		if d.status != 0 {
			ev = ev.Int(fieldStatus, d.status)
		}
		if len(d.injected) > 0 {
			ev = ev.Strs(fieldInjected, d.injected)
		}
		d.mu.Lock()
		in, out := d.bytesIn, d.bytesOut
		d.mu.Unlock()
		ev.Int64(fieldBytesIn, in).
			Int64(fieldBytesOut, out).
			Float64(fieldDuration, float64(time.Since(d.start).Microseconds())/1000).
			Msg("decision")
	})
}
