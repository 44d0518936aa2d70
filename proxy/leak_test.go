package proxy

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookgate/hookgate/ca"
	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/internal/admin"
	"github.com/hookgate/hookgate/transform"
)

// freshSecret is a canary secret new to every run, so that a hit can only
// come from this run's injection.
func freshSecret(t testing.TB) string {
	t.Helper()
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "hgleak" + hex.EncodeToString(b)
}

// leakForms are the forms of an injected credential a scan looks for: the
// secret and the whole header value, as they are, base64 (both alphabets,
// padded or not) and hex (both cases).
func leakForms(secret string) map[string]string {
	forms := map[string]string{}
	for name, v := range map[string]string{"secret": secret, "header value": "Bearer " + secret} {
		b := []byte(v)
		forms[name] = v
		forms[name+" base64"] = base64.StdEncoding.EncodeToString(b)
		forms[name+" base64url"] = base64.RawURLEncoding.EncodeToString(b)
		forms[name+" hex"] = hex.EncodeToString(b)
		forms[name+" HEX"] = strings.ToUpper(hex.EncodeToString(b))
	}
	return forms
}

// assertNoLeak fails if text holds any form of the secret. It names the
// form and where, never the text (which would print the secret).
func assertNoLeak(t testing.TB, where, text string, forms map[string]string) {
	t.Helper()
	for name, form := range forms {
		if i := strings.Index(text, form); i >= 0 {
			t.Errorf("%s carries the %s (at byte %d of %d)", where, name, i, len(text))
		}
	}
}

// leakEnv is a gateway that injects "Authorization: Bearer <secret>" for
// telemetry.example.com (over HTTPS, and over plain HTTP too), a TLS and a
// plain raw upstream, and the admin API's /v1/decisions fed from the
// gateway's decisions.
type leakEnv struct {
	secret   string
	gw       *gateway
	tlsUp    *rawUpstream
	plainUp  *rawUpstream
	clientCA *x509.CertPool // trusts the gateway's CA
	adminURL string
	// reply makes both upstreams' answer, exact bytes malformed on
	// purpose, of the Authorization value they received.
	reply atomic.Pointer[func(auth string) []byte]
}

func (e *leakEnv) setReply(f func(auth string) []byte) { e.reply.Store(&f) }

// answer records the request head and writes what reply makes of it.
func (e *leakEnv) answer(u *rawUpstream) func(net.Conn, *bufio.Reader) {
	return func(c net.Conn, br *bufio.Reader) {
		r, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		u.record(rawRequest{method: r.Method, target: r.RequestURI, header: r.Header})
		if f := e.reply.Load(); f != nil {
			_, _ = c.Write((*f)(r.Header.Get("Authorization")))
		}
	}
}

func newLeakEnv(t testing.TB) *leakEnv {
	t.Helper()
	e := &leakEnv{secret: freshSecret(t)}
	ourCA, ourPool := newCA(t)
	upCA, upPool := newCA(t)
	upLeaves := ca.NewLeafCache(upCA, 4)
	e.tlsUp = newRawUpstream(t, &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
			return upLeaves.Get(h.ServerName)
		},
	})
	e.plainUp = newRawUpstream(t, nil)
	e.tlsUp.serve(e.answer(e.tlsUp))
	e.plainUp.serve(e.answer(e.plainUp))
	rules, err := transform.Compile([]transform.HeaderSpec{{Name: "Authorization", Value: "Bearer ${env:LEAK}"}},
		transform.Options{LookupEnv: func(string) (string, bool) { return e.secret, true }})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		records []Record
	)
	e.gw = startGateway(t, gatewayConfig{
		allow:    []string{"telemetry.example.com"},
		exempt:   []string{e.tlsUp.ln.Addr().String(), e.plainUp.ln.Addr().String()},
		names:    map[string][]string{"telemetry.example.com": {"127.0.0.1"}},
		rootPool: upPool,
		entries:  []config.Entry{{Transform: rules, AllowPlaintext: true}},
		leaves:   ca.NewLeafCache(ourCA, 4),
		observer: Observer{Decision: func(r Record) { mu.Lock(); records = append(records, r); mu.Unlock() }},
	})
	adminSrv := httptest.NewServer(admin.New(admin.Options{
		Decisions: func(n int) any {
			mu.Lock()
			defer mu.Unlock()
			return append([]Record(nil), records[max(0, len(records)-n):]...)
		},
		Redact: e.gw.srv.Redact,
	}))
	t.Cleanup(adminSrv.Close)
	// Runs before the harness prints the log of a failed test: that log
	// may hold the secret.
	t.Cleanup(func() {
		if t.Failed() {
			e.gw.logs.Reset()
			t.Log("the gateway's log is withheld: it may hold the secret")
		}
	})
	e.clientCA, e.adminURL = ourPool, adminSrv.URL
	return e
}

// exchange sends one GET through the gateway and returns every byte the
// client got. path picks how: "mitm" (CONNECT, then TLS with the gateway's
// leaf), "https" (an absolute-form https:// request to the proxy) or
// "plain" (an absolute-form http:// request).
func (e *leakEnv) exchange(t testing.TB, path string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", e.gw.addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	var conn net.Conn = c
	target, host := "/", "telemetry.example.com:"+e.tlsUp.port()
	switch path {
	case "mitm":
		authority := "telemetry.example.com:" + e.tlsUp.port()
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", authority, authority)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %v %v", err, resp)
		}
		tc := tls.Client(c, &tls.Config{ServerName: "telemetry.example.com", RootCAs: e.clientCA})
		if err := tc.Handshake(); err != nil {
			t.Fatalf("handshake with the gateway: %v", err)
		}
		conn = tc
	case "https":
		target = "https://telemetry.example.com:" + e.tlsUp.port() + "/"
	case "plain":
		target = "http://telemetry.example.com:" + e.plainUp.port() + "/"
	default:
		t.Fatalf("unknown path %q", path)
	}
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", target, host)
	var out bytes.Buffer
	_, _ = io.Copy(&out, conn)
	return out.String()
}

// decisionsAnswer is the body of GET /v1/decisions.
func (e *leakEnv) decisionsAnswer(t testing.TB) string {
	t.Helper()
	resp, err := http.Get(e.adminURL + "/v1/decisions?limit=1000")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/v1/decisions: %d %v", resp.StatusCode, err)
	}
	return string(b)
}

// malformedReplies are upstream answers that net/http cannot parse (or
// can parse only in part), each carrying the injected value or a form of
// it where a parser quotes what it refused. {AUTH} is the Authorization
// value the upstream received, {S} the secret alone, {B64} and {HEX} the
// header value encoded.
var malformedReplies = map[string]string{
	"header without colon":      "HTTP/1.1 200 OK\r\nX-Echo {AUTH}\r\n\r\n",
	"status line is the value":  "{AUTH} 200 OK\r\n\r\n",
	"status code is the secret": "HTTP/1.1 {S} OK\r\n\r\n",
	"status code only":          "HTTP/1.1 {S}\r\n\r\n",
	"content-length":            "HTTP/1.1 200 OK\r\nContent-Length: {S}\r\n\r\n",
	"two content-lengths":       "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: {S}\r\n\r\nhello",
	"transfer-encoding":         "HTTP/1.1 200 OK\r\nTransfer-Encoding: {S}\r\n\r\n",
	"folded first header":       "HTTP/1.1 200 OK\r\n X-Fold: {AUTH}\r\n\r\n",
	"base64 without colon":      "HTTP/1.1 200 OK\r\nX-B64 {B64}\r\n\r\n",
	"hex without colon":         "HTTP/1.1 200 OK\r\nX-Hex {HEX}\r\n\r\n",
	"hex status":                "HTTP/1.1 {HEX}\r\n\r\n",
	"truncated header":          "HTTP/1.1 200 OK\r\nX-Echo: {AUTH}\r\n",
	"the value and nothing":     "{AUTH}",
	"bad chunk size":            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{S}\r\n",
	"bad chunk size, base64":    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{B64}\r\n",
	"NUL in a header name":      "HTTP/1.1 200 OK\r\nX-\x00{S}: 1\r\n\r\n",
	"space in a header name":    "HTTP/1.1 200 OK\r\nX Echo {S}: 1\r\n\r\n",
	"huge header":               "HTTP/1.1 200 OK\r\nX-Big: {AUTH}" + strings.Repeat("a", 70<<10) + "\r\n\r\n",
}

// expand fills a reply template with what the upstream received.
func expand(template, auth string) []byte {
	secret := strings.TrimPrefix(auth, "Bearer ")
	return []byte(strings.NewReplacer(
		"{AUTH}", auth,
		"{S}", secret,
		"{B64}", base64.StdEncoding.EncodeToString([]byte(auth)),
		"{HEX}", hex.EncodeToString([]byte(auth)),
	).Replace(template))
}

// TestMalformedUpstreamRepliesDoNotLeak: a malformed upstream reply that
// carries the injected credential reaches neither the client's answer, nor
// the decision line, nor any other log line, nor /v1/decisions, on every
// path a credential is injected on.
func TestMalformedUpstreamRepliesDoNotLeak(t *testing.T) {
	e := newLeakEnv(t)
	forms := leakForms(e.secret)
	for _, path := range []string{"mitm", "https", "plain"} {
		for name, template := range malformedReplies {
			t.Run(path+"/"+name, func(t *testing.T) {
				e.setReply(func(auth string) []byte { return expand(template, auth) })
				answer := e.exchange(t, path)
				// A body that breaks after the header may end the
				// connection with nothing more (the header not flushed).
				if answer != "" && !strings.HasPrefix(answer, "HTTP/1.1 ") {
					t.Fatalf("no HTTP answer (%d bytes)", len(answer))
				}
				assertNoLeak(t, "the client's answer", answer, forms)
			})
		}
	}
	n := 3 * len(malformedReplies)
	lines := e.gw.logs.waitDecisions(t, n)
	// The upstream really got the credential: the test is not vacuous.
	_, tlsGot := e.tlsUp.received()
	_, plainGot := e.plainUp.received()
	got := append(tlsGot, plainGot...)
	if len(got) != n || got[0].header.Get("Authorization") != "Bearer "+e.secret {
		t.Fatalf("the upstreams got %d requests (want %d), the first with the credential: %v",
			len(got), n, len(got) > 0 && got[0].header.Get("Authorization") == "Bearer "+e.secret)
	}
	assertNoLeak(t, "the gateway's log", e.gw.logs.String(), forms)
	assertNoLeak(t, "/v1/decisions", e.decisionsAnswer(t), forms)
	for _, d := range lines {
		if d["code"] != nil && d["code"] != string(CodeUpstreamError) && d["code"] != string(CodeUpstreamTLS) {
			t.Errorf("decision with code %v, want %s", d["code"], CodeUpstreamError)
		}
	}
}

// TestUpstreamErrorReasons: the reasons of malformed replies name the
// class of the error.
func TestUpstreamErrorReasons(t *testing.T) {
	e := newLeakEnv(t)
	tests := []struct {
		reply, reason string
	}{
		{"HTTP/1.1 200 OK\r\nX-Echo {AUTH}\r\n\r\n", "the upstream's response is not valid HTTP/1.1"},
		{"HTTP/1.1 {S} OK\r\n\r\n", "the upstream's response is not valid HTTP/1.1"},
		{"HTTP/1.1 200 OK\r\nX-Echo: {AUTH}\r\n", "the upstream closed the connection before a complete response"},
		{"", "the upstream closed the connection before a complete response"},
	}
	for i, tt := range tests {
		e.setReply(func(auth string) []byte { return expand(tt.reply, auth) })
		answer := e.exchange(t, "plain")
		_, body, _ := strings.Cut(answer, "\r\n\r\n")
		var den denialBody
		if err := json.Unmarshal([]byte(body), &den); err != nil || den.Error != CodeUpstreamError {
			t.Fatalf("case %d: not an upstream-error denial (%v)", i, err)
		}
		if den.Reason != tt.reason {
			t.Errorf("case %d: reason %q, want %q", i, strings.ReplaceAll(den.Reason, e.secret, "<S>"), tt.reason)
		}
	}
}

// TestRandomMalformedRepliesDoNotLeak is the fuzz test of the response
// path in the normal run: a bounded number of random replies, each with the
// credential (or a form of it) spliced in at random places.
func TestRandomMalformedRepliesDoNotLeak(t *testing.T) {
	iterations := 60
	if testing.Short() {
		iterations = 15
	}
	e := newLeakEnv(t)
	forms := leakForms(e.secret)
	seeds := make([]string, 0, len(malformedReplies))
	for _, r := range malformedReplies {
		seeds = append(seeds, r)
	}
	paths := []string{"plain", "https", "mitm"}
	for i := 0; i < iterations; i++ {
		rnd := make([]byte, 64)
		_, _ = rand.Read(rnd)
		template := mutateReply(seeds[int(rnd[0])%len(seeds)], rnd[1:])
		e.setReply(func(auth string) []byte { return expand(template, auth) })
		answer := e.exchange(t, paths[i%len(paths)])
		assertNoLeak(t, fmt.Sprintf("iteration %d: the client's answer", i), answer, answerForms(template, e.secret, forms))
		if t.Failed() {
			t.Fatalf("reply template (placeholders unexpanded): %q", template)
		}
	}
	e.gw.logs.waitDecisions(t, iterations)
	assertNoLeak(t, "the gateway's log", e.gw.logs.String(), forms)
	assertNoLeak(t, "/v1/decisions", e.decisionsAnswer(t), forms)
}

// mutateReply changes a reply template with the random bytes given:
// placeholders inserted, bytes flipped, CR/LF/colon/space dropped in.
func mutateReply(template string, rnd []byte) string {
	b := []byte(template)
	placeholders := []string{"{AUTH}", "{S}", "{B64}", "{HEX}"}
	special := []byte{'\r', '\n', ':', ' ', '\t', 0, 0xff, '"'}
	for i := 0; i+2 < len(rnd); i += 3 {
		pos := 0
		if len(b) > 0 {
			pos = int(rnd[i+1]) * len(b) / 256
		}
		switch rnd[i] % 4 {
		case 0:
			b = append(b[:pos], append([]byte(placeholders[int(rnd[i+2])%len(placeholders)]), b[pos:]...)...)
		case 1:
			b = append(b[:pos], append([]byte{special[int(rnd[i+2])%len(special)]}, b[pos:]...)...)
		case 2:
			if pos < len(b) {
				b[pos] = rnd[i+2]
			}
		case 3:
			if pos < len(b) {
				b = append(b[:pos], b[pos+1:]...)
			}
		}
	}
	return string(b)
}

// FuzzUpstreamReply: any reply, with the credential spliced in, leaves no
// form of it in the client's answer, the log or /v1/decisions. The normal
// run tries the seeds; go test -fuzz explores further.
func FuzzUpstreamReply(f *testing.F) {
	for _, r := range malformedReplies {
		f.Add([]byte(r), uint16(0))
	}
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc"), uint16(17))
	e := newLeakEnv(f)
	forms := leakForms(e.secret)
	var i atomic.Int64
	f.Fuzz(func(t *testing.T, reply []byte, at uint16) {
		if len(reply) > 8<<10 {
			return
		}
		pos := int(at) % (len(reply) + 1)
		template := string(reply[:pos]) + "{AUTH}" + string(reply[pos:])
		e.setReply(func(auth string) []byte { return expand(template, auth) })
		paths := []string{"plain", "https", "mitm"}
		answer := e.exchange(t, paths[i.Add(1)%3])
		assertNoLeak(t, "the client's answer", answer, answerForms(template, e.secret, forms))
		e.gw.logs.waitDecisions(t, int(i.Load()))
		assertNoLeak(t, "the gateway's log", e.gw.logs.String(), forms)
		assertNoLeak(t, "/v1/decisions", e.decisionsAnswer(t), forms)
	})
}

// answerForms is what must not reach the client for a reply template. A
// reply whose header parses is relayed, and what it carries in its headers
// and body is the response scrubber's to clean: it finds the credential as
// it is, not encoded (an upstream that encodes what it was sent is beyond
// any scrubber). A reply that does not parse gets the gateway's own
// answer, which must carry no form of it.
func answerForms(template, secret string, forms map[string]string) map[string]string {
	reply := expand(template, "Bearer "+secret)
	if _, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(reply)), nil); err == nil {
		return map[string]string{"secret": secret}
	}
	return forms
}

// TestClientBytesNotQuoted: what a client sends in a refused request (here
// the credential itself, as a sandbox that learnt it might) is not quoted
// back by the reasons that judge its syntax, and no form of it reaches
// the log or /v1/decisions, where the policy's scrubber is the last line.
func TestClientBytesNotQuoted(t *testing.T) {
	e := newLeakEnv(t)
	forms := leakForms(e.secret)
	s := e.secret
	tests := []struct {
		name, request string
		code          Code
		quoted        bool // the answer may name the (normalised) host
	}{
		{"scheme", "GET x" + s + "://telemetry.example.com/ HTTP/1.1\r\nHost: telemetry.example.com\r\n\r\n", CodeBadRequest, false},
		{"host syntax", "CONNECT " + s + "_!.example.com:443 HTTP/1.1\r\nHost: x\r\n\r\n", CodeBadRequest, false},
		{"host label too long", "CONNECT " + strings.Repeat(s, 3) + ".example.com:443 HTTP/1.1\r\nHost: x\r\n\r\n", CodeBadRequest, false},
		{"not allowed", "CONNECT " + s + ".example.com:443 HTTP/1.1\r\nHost: x\r\n\r\n", CodeAllowlist, true},
		{"not allowed, plain", "GET http://" + s + ".example.com/ HTTP/1.1\r\nHost: x\r\n\r\n", CodeAllowlist, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			answer := e.gw.raw(t, tt.request)
			if !strings.Contains(answer, "X-Proxy-Error: "+string(tt.code)) {
				t.Fatalf("answer has no %s (%d bytes)", tt.code, len(answer))
			}
			if !tt.quoted {
				assertNoLeak(t, "the answer", answer, forms)
			}
		})
	}
	e.gw.logs.waitDecisions(t, len(tests))
	assertNoLeak(t, "the gateway's log", e.gw.logs.String(), forms)
	assertNoLeak(t, "/v1/decisions", e.decisionsAnswer(t), forms)
}

// TestStdLoggerRedacts: net/http's and goproxy's own messages, which quote
// errors the gateway did not word, pass the policy's scrubber too.
func TestStdLoggerRedacts(t *testing.T) {
	e := newLeakEnv(t)
	e.gw.srv.stdLogger().Printf("httputil: ReverseProxy read error: malformed %q and %s", "Bearer "+e.secret,
		base64.StdEncoding.EncodeToString([]byte(e.secret)))
	logs := e.gw.logs.String()
	if !strings.Contains(logs, `malformed \"[redacted]\" and [redacted]`) {
		t.Errorf("the message did not reach the log redacted (%d bytes of log)", len(logs))
	}
	assertNoLeak(t, "the gateway's log", logs, leakForms(e.secret))
}

// BenchmarkRedactRecord: what scrubbing a decision record costs when the
// policy injects a secret (paid once per decision line).
func BenchmarkRedactRecord(b *testing.B) {
	rules, err := transform.Compile([]transform.HeaderSpec{{Name: "Authorization", Value: "Bearer ${env:X}"}},
		transform.Options{LookupEnv: func(string) (string, bool) { return "hgbench0123456789abcdef", true }})
	if err != nil {
		b.Fatal(err)
	}
	p := &config.Policy{Entries: []config.Entry{{Transform: rules}}}
	r := &redactor{policy: func() *config.Policy { return p }}
	rec := Record{Host: "telemetry.example.com", Method: "POST", SNI: "telemetry.example.com",
		Reason: "the upstream's response is not valid HTTP/1.1"}
	b.ReportAllocs()
	for b.Loop() {
		_ = r.record(rec)
	}
}
