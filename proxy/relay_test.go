package proxy

import (
	"io"
	"net"
	"testing"
)

// TestTunnelHalfClose: each side's FIN reaches the other through an opaque
// tunnel, right behind the last bytes sent before it, and the tunnel ends
// (with its bytes counted) once both sides have closed. The upstream sends
// its answer and its FIN back to back, so that they often reach the
// gateway together: a relay that stopped reading after a short read
// would miss that FIN, and the client's read would run into its deadline.
func TestTunnelHalfClose(t *testing.T) {
	gw, up, hello, target := tunnelGateway(t, gatewayConfig{})
	const rounds = 20
	for i := range rounds {
		ex := &idleExchange{up: up, hello: hello}
		t.Cleanup(ex.close) // before the gateway's Shutdown, which waits for its tunnels
		if err := ex.openThrough(gw.addr, target); err != nil {
			t.Fatal(err)
		}
		halfCloseRound(t, ex)
		ex.close()
		d := gw.logs.waitDecisions(t, i+1)[i]
		if d["verdict"] != "allow" || d["bytes_in"] != float64(len(hello)+len("request")) || d["bytes_out"] != float64(len("answer")) {
			t.Fatalf("round %d: decision = %v", i, d)
		}
	}
}

// halfCloseRound half-closes the client's end after a request and the
// upstream's after its answer; each side must read the other's bytes to
// their end (EOF, not its deadline).
func halfCloseRound(t *testing.T, ex *idleExchange) {
	t.Helper()
	if err := readN(ex.upstream, len(ex.hello)); err != nil {
		t.Fatalf("upstream reading the ClientHello: %v", err)
	}
	if _, err := ex.client.Write([]byte("request")); err != nil {
		t.Fatal(err)
	}
	if err := ex.client.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(ex.upstream)
	if err != nil || string(got) != "request" {
		t.Fatalf("upstream read %q to %v, want the request to EOF", got, err)
	}
	if _, err := ex.upstream.Write([]byte("answer")); err != nil {
		t.Fatal(err)
	}
	if err := ex.upstream.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err = io.ReadAll(ex.client)
	if err != nil || string(got) != "answer" {
		t.Fatalf("client read %q to %v, want the answer to EOF", got, err)
	}
}
