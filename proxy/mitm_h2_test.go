package proxy

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookgate/hookgate/ca"
	"github.com/hookgate/hookgate/config"
)

// grpcHealthServing is a gRPC message frame (uncompressed, 2 bytes) holding
// grpc.health.v1.HealthCheckResponse{status: SERVING}.
var grpcHealthServing = []byte{0, 0, 0, 0, 2, 0x08, 0x01}

// grpcHealthUpstream answers grpc.health.v1.Health/Check over h2 as a gRPC
// server does, echoing the metadata it got in a trailer.
func grpcHealthUpstream(t *testing.T, h2 bool) *httptest.Server {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path != "/grpc.health.v1.Health/Check" || r.Header.Get("Content-Type") != "application/grpc" || !bytes.Equal(body, []byte{0, 0, 0, 0, 0}) {
			http.Error(w, "not a health check", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Trailer", "Grpc-Status, Grpc-Message, X-Proto")
		_, _ = w.Write(grpcHealthServing)
		w.Header().Set("Grpc-Status", "0")
		w.Header().Set("Grpc-Message", r.Header.Get("Authorization"))
		w.Header().Set("X-Proto", fmt.Sprintf("%d|%s", r.ProtoMajor, r.Header.Get("Te")))
	}))
	srv.EnableHTTP2 = h2
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

func TestMITMGRPCOverH2(t *testing.T) {
	for _, upstreamH2 := range []bool{true, false} {
		t.Run(fmt.Sprintf("upstream-h2=%v", upstreamH2), func(t *testing.T) {
			up := grpcHealthUpstream(t, upstreamH2)
			authority, pool := newCA(t)
			hostPort := up.Listener.Addr().String()
			g := startGateway(t, gatewayConfig{
				allow:   []string{"grpc.example.com"},
				exempt:  []string{hostPort},
				names:   map[string][]string{"grpc.example.com": {"127.0.0.1"}},
				roots:   up,
				entries: []config.Entry{{Transform: compileRules(t, map[string]string{"Authorization": "Bearer ${env:CANARY}"})}},
				leaves:  ca.NewLeafCache(authority, 16),
			})
			proxyURL, _ := url.Parse("http://" + g.addr)
			tr := &http.Transport{Proxy: http.ProxyURL(proxyURL), TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
			t.Cleanup(tr.CloseIdleConnections)
			c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
			_, port := splitHostPortDefault(hostPort, "")
			for i := 0; i < 2; i++ {
				req, _ := http.NewRequest(http.MethodPost, "https://grpc.example.com:"+port+"/grpc.health.v1.Health/Check", bytes.NewReader([]byte{0, 0, 0, 0, 0}))
				req.Header.Set("Content-Type", "application/grpc")
				req.Header.Set("Te", "trailers")
				req.Header.Set("Authorization", "Bearer sandbox")
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				wantProto := 1
				if upstreamH2 {
					wantProto = 2
				}
				if resp.StatusCode != 200 || resp.ProtoMajor != wantProto || !bytes.Equal(body, grpcHealthServing) {
					t.Fatalf("got %d over HTTP/%d, body %x", resp.StatusCode, resp.ProtoMajor, body)
				}
				if resp.Trailer.Get("Grpc-Status") != "0" || resp.Trailer.Get("Grpc-Message") != "[redacted]" {
					t.Fatalf("trailers: status %q, echoed metadata %q", resp.Trailer.Get("Grpc-Status"), hideCanary(resp.Trailer.Get("Grpc-Message")))
				}
				if upstreamH2 && resp.Trailer.Get("X-Proto") != "2|trailers" {
					t.Fatalf("upstream saw %q", resp.Trailer.Get("X-Proto"))
				}
			}
			ds := g.logs.waitDecisions(t, 2)
			for _, d := range ds {
				if d["mode"] != "mitm" || d["status"] != 200.0 || fmt.Sprint(d["injected"]) != "[Authorization]" || d["upstream"] != hostPort {
					t.Fatalf("decision = %v", d)
				}
			}
			if s := g.logs.String(); bytes.Contains([]byte(s), []byte(canary)) {
				t.Fatal("the secret appears in the log")
			}
		})
	}
}

// protoRecorder remembers the protocol of every response its transport got.
type protoRecorder struct {
	rt     http.RoundTripper
	mu     sync.Mutex
	protos []int
}

func (p *protoRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := p.rt.RoundTrip(r)
	if err == nil {
		p.mu.Lock()
		p.protos = append(p.protos, resp.ProtoMajor)
		p.mu.Unlock()
	}
	return resp, err
}

// TestResponseHeaderTimeoutPerEntryMITMH2: an entry's response-header
// timeout holds inside intercepted tunnels that speak HTTP/2 as it does
// over HTTP/1.1: the quick host's request gets its 504 while the patient
// host's, sent first, is still answered.
func TestResponseHeaderTimeoutPerEntryMITMH2(t *testing.T) {
	up := newGatedUpstream()
	origin := httptest.NewUnstartedServer(http.HandlerFunc(up.serve))
	origin.EnableHTTP2 = true
	origin.Config.ErrorLog = log.New(io.Discard, "", 0)
	origin.StartTLS()
	t.Cleanup(origin.Close)
	authority, pool := newCA(t)
	hostPort := origin.Listener.Addr().String()
	rules := compileRules(t, map[string]string{"Authorization": "Bearer ${env:CANARY}"})
	g := startGateway(t, gatewayConfig{
		allow:    []string{"telemetry.example.com", "llm.example.com"},
		exempt:   []string{hostPort},
		names:    map[string][]string{"telemetry.example.com": {"127.0.0.1"}, "llm.example.com": {"127.0.0.1"}},
		roots:    origin,
		entries:  []config.Entry{{Transform: rules}, {Transform: rules, ResponseHeaderTimeout: longTimeout}},
		timeouts: Timeouts{ResponseHeader: shortTimeout},
		leaves:   ca.NewLeafCache(authority, 16),
	})
	proxyURL, _ := url.Parse("http://" + g.addr)
	tr := &http.Transport{Proxy: http.ProxyURL(proxyURL), TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
	t.Cleanup(tr.CloseIdleConnections)
	rec := &protoRecorder{rt: tr}
	c := &http.Client{Transport: rec, Timeout: 10 * time.Second}
	_, port := splitHostPortDefault(hostPort, "")
	checkSlowAnswers(t, c, up, "https://llm.example.com:"+port+"/patient", "https://telemetry.example.com:"+port+"/quick")
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if fmt.Sprint(rec.protos) != "[2 2]" {
		t.Fatalf("the answers came over HTTP/%v, want HTTP/2 for both", rec.protos)
	}
	g.logs.waitDecisions(t, 2)
	if strings.Contains(g.logs.String(), canary) {
		t.Fatal("the secret appears in the gateway's log")
	}
}
