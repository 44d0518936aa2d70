package proxy

import (
	"bytes"
	"crypto/tls"
	"net"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

// TestLayers: one walk finds each of our wrappers under the others, in the
// plain and the TLS form, and stops at a replayConn, whose bytes must be
// read before anything under it.
func TestLayers(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	s := &Server{}
	counted := &countedConn{Conn: a}
	watched := s.watch(counted, nil)
	framed := newFramingConn(watched, 1<<10)

	if got, ok := layerOf[*countedConn](framed); !ok || got != counted {
		t.Errorf("countedConn under framing and watch: %v %v", got, ok)
	}
	if w := watchOf(framed); w == nil || w.Conn != counted {
		t.Errorf("watchOf under framing: %v", w)
	}
	if got := innermost(framed); got != a {
		t.Errorf("innermost %T, want the pipe", got)
	}

	tlsWatched := s.watch(tls.Server(&replayConn{Conn: counted}, &tls.Config{}), nil)
	if _, ok := tlsWatched.(watchTLSConn); !ok {
		t.Fatalf("a watched TLS connection is %T", tlsWatched)
	}
	if w := watchOf(newFramingConn(tlsWatched, 1<<10)); w == nil {
		t.Error("watchOf misses the TLS form")
	}
	if _, ok := layerOf[*countedConn](tlsWatched); ok {
		t.Error("the walk went past a replayConn")
	}
}

// TestDecisionFinish: a decision's owner finishes it once, whoever calls;
// one handed off to the requests it became writes no line of its own.
func TestDecisionFinish(t *testing.T) {
	var buf bytes.Buffer
	k := &sink{log: zerolog.New(&buf)}
	lines := 0
	k.observer.Decision = func(Record) { lines++ }

	d := newDecision(k, "192.0.2.1:1", modeTunnel)
	d.finish()
	d.finish()
	if lines != 1 || strings.Count(buf.String(), "\n") != 1 {
		t.Fatalf("finished twice: %d records, log %q; want one line", lines, buf.String())
	}

	tunnel := newDecision(k, "192.0.2.1:2", modeTunnel)
	tunnel.handOff()
	inner := newDecision(k, tunnel.client, modeMITM)
	inner.finish()
	tunnel.finish()
	if lines != 2 || !strings.Contains(buf.String(), `"mode":"mitm"`) || strings.Count(buf.String(), `"mode":"tunnel"`) != 1 {
		t.Fatalf("handed off: %d records, log %q; want the request's line only", lines, buf.String())
	}
}
