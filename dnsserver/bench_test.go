package dnsserver

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/rs/zerolog"

	"github.com/hookgate/hookgate/config"
)

func benchServer(b *testing.B, log zerolog.Logger) *Server {
	res := newFakeResolver()
	seed(res)
	p := mustPolicy(b, testDomains...)
	s := New(Options{Policy: func() *config.Policy { return p }, Resolver: res, Logger: log})
	b.Cleanup(func() { s.Shutdown(context.Background()) })
	return s
}

// BenchmarkServeDNSCached is the handler alone, for an allowlisted name
// answered from the cache: normalise, allowlist, cache, address policy,
// build, truncate, pack (in the recorder, as the real writer does) and the
// decision line.
func BenchmarkServeDNSCached(b *testing.B) {
	for _, bc := range []struct {
		name string
		log  zerolog.Logger
	}{
		{"log=json", zerolog.New(io.Discard)},
		{"log=off", zerolog.Nop()},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s := benchServer(b, bc.log)
			m := new(dns.Msg)
			m.SetQuestion("allowed.test.", dns.TypeA)
			w := newRecorder("udp")
			s.ServeDNS(w, m) // fill the cache
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				s.ServeDNS(w, m)
			}
			b.StopTimer()
			if len(w.msg.Answer) != 1 {
				b.Fatalf("answer %v", w.msg)
			}
		})
	}
}

// BenchmarkUDPRoundTripCached is one query and its answer over a real
// loopback UDP socket, client included: what the sandbox sees, minus the
// veth hop.
func BenchmarkUDPRoundTripCached(b *testing.B) {
	s := benchServer(b, zerolog.New(io.Discard))
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.ServeUDP(pc) }()
	b.Cleanup(func() {
		s.Shutdown(context.Background())
		<-done
	})

	c := &dns.Client{Net: "udp", Timeout: 5 * time.Second}
	conn, err := c.Dial(pc.LocalAddr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	m := new(dns.Msg)
	m.SetQuestion("allowed.test.", dns.TypeA)
	if _, _, err := c.ExchangeWithConn(m, conn); err != nil { // fill the cache
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		r, _, err := c.ExchangeWithConn(m, conn)
		if err != nil || len(r.Answer) != 1 {
			b.Fatalf("%v %v", r, err)
		}
	}
}
