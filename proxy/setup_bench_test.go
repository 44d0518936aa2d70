package proxy

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/hookgate/hookgate/internal/metrics"
)

// BenchmarkTunnelSetup measures what opening a tunnel costs: per
// iteration a new TCP connection, CONNECT, TLS handshake through the
// tunnel to a loopback TLS upstream, one small GET, close. The gateway
// runs as the bench runs it (log level error, metrics recording), in the
// same process as the client and the upstream, so its allocations are the
// difference between the proxied and the direct sub-benchmark.
func BenchmarkTunnelSetup(b *testing.B) {
	up := newUpstream(b, true, func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(make([]byte, 1024))
	})
	cfg := up.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	// An IP literal: verified against the certificate's IP SAN, no SNI sent
	// (as the bench's load generator does).
	cfg.ServerName = "127.0.0.1"
	target := up.hostPort()

	b.Run("direct", func(b *testing.B) {
		benchTunnels(b, func() (net.Conn, error) { return net.Dial("tcp", target) }, cfg)
	})
	b.Run("proxied", func(b *testing.B) {
		gwAddr := startBenchGateway(b, target)
		benchTunnels(b, func() (net.Conn, error) { return dialConnect(gwAddr, target) }, cfg)
	})
}

// startBenchGateway serves a gateway that allows the upstream at target
// (exempt from the address policy), logging errors only and recording
// metrics like the gateway command does.
func startBenchGateway(b *testing.B, target string) string {
	b.Helper()
	m := metrics.New()
	gw := startGateway(b, gatewayConfig{
		allow:    []string{"127.0.0.1"},
		exempt:   []string{target},
		logLevel: zerolog.ErrorLevel,
		observer: Observer{
			Decision: func(r Record) {
				m.Request(r.Mode, r.Verdict, string(r.Code), r.Entry)
				m.TenantRequest(r.Tenant, r.Verdict, string(r.Code))
				m.Bytes(metrics.DirectionIn, r.BytesIn)
				m.Bytes(metrics.DirectionOut, r.BytesOut)
			},
			Tunnel: func(delta int) {
				if delta > 0 {
					m.TunnelOpened()
				} else {
					m.TunnelClosed()
				}
			},
			Connection: m.ActiveConnections,
		},
	})
	return gw.addr
}

// dialConnect opens a tunnel to target through the gateway at gwAddr.
func dialConnect(gwAddr, target string) (net.Conn, error) {
	c, err := net.Dial("tcp", gwAddr)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n\r\n"); err != nil {
		c.Close()
		return nil, err
	}
	br := bufio.NewReaderSize(c, 256)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		c.Close()
		return nil, err
	}
	if resp.StatusCode != http.StatusOK || br.Buffered() > 0 {
		c.Close()
		return nil, errors.New("CONNECT: " + resp.Status)
	}
	return c, nil
}

// benchTunnels runs b.N tunnels from 8 goroutines, each: dial, TLS
// handshake, GET /, read the answer to its end, close.
func benchTunnels(b *testing.B, dial func() (net.Conn, error), cfg *tls.Config) {
	b.ReportAllocs()
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := oneTunnel(dial, cfg); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func oneTunnel(dial func() (net.Conn, error), cfg *tls.Config) error {
	c, err := dial()
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	tc := tls.Client(c, cfg)
	if _, err := io.WriteString(tc, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		return err
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || n != 1024 {
		return errors.New("unexpected answer: " + resp.Status)
	}
	return nil
}
