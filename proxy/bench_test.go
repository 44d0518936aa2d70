package proxy

import (
	"crypto/tls"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"testing"
)

// BenchmarkForward measures plain-HTTP forwarding over keep-alive
// connections, gateway, clients and upstream in one process (for profiles;
// the ratios against direct come from the bench command).
func BenchmarkForward(b *testing.B) {
	up := newUpstream(b, false, func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(make([]byte, 1024))
	})
	gw := startGateway(b, gatewayConfig{allow: []string{"*"}, exempt: []string{up.hostPort()}})
	benchForward(b, &url.URL{Scheme: "http", Host: gw.addr}, up.URL)
}

// benchForward GETs target through the proxy at proxyURL from 16
// goroutines per core over keep-alive connections, each answer read to
// its end and required to be a 200.
func benchForward(b *testing.B, proxyURL *url.URL, target string) {
	tr := &http.Transport{Proxy: http.ProxyURL(proxyURL), MaxIdleConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := c.Get(target)
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
}

// BenchmarkMITM measures requests with injection inside intercepted
// keep-alive tunnels (for profiles, like BenchmarkForward).
func BenchmarkMITM(b *testing.B) {
	env := newMITMEnv(b, func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(make([]byte, 1024))
	}, nil)
	proxyURL, _ := url.Parse("http://" + env.gw.addr)
	tr := &http.Transport{Proxy: http.ProxyURL(proxyURL), MaxIdleConnsPerHost: 64,
		TLSClientConfig: &tls.Config{RootCAs: env.caPool}}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	target := env.url("telemetry.example.com", "/")
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := c.Get(target)
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
}

// BenchmarkForwardDownload measures one large plain-HTTP download
// forwarded through the gateway (the bulk copy of a response body: its
// buffer size and the system calls per byte), one download at a time.
func BenchmarkForwardDownload(b *testing.B) {
	const size = 64 << 20
	chunk := make([]byte, 1<<20)
	up := newUpstream(b, false, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(size))
		for left := size; left > 0; left -= len(chunk) {
			if _, err := w.Write(chunk[:min(left, len(chunk))]); err != nil {
				return
			}
		}
	})
	gw := startGateway(b, gatewayConfig{allow: []string{"*"}, exempt: []string{up.hostPort()}})
	tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: gw.addr})}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	// The client reads with a large buffer too, so that its reads are not
	// what the benchmark measures (io.Discard alone reads 8 KiB at a time).
	sink := struct{ io.Writer }{io.Discard}
	buf := make([]byte, 1<<20)
	b.SetBytes(size)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		resp, err := c.Get(up.URL)
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.CopyBuffer(sink, resp.Body, buf)
		resp.Body.Close()
		if err != nil || n != size || resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d, %d of %d bytes: %v", resp.StatusCode, n, size, err)
		}
	}
}
