package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// holdConns opens n connections to the gateway that send nothing yet.
func holdConns(t *testing.T, gw *gateway, n int) []net.Conn {
	t.Helper()
	var conns []net.Conn
	for i := 0; i < n; i++ {
		c, err := net.DialTimeout("tcp", gw.addr, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		conns = append(conns, c)
	}
	return conns
}

// admissions counts, on its channel, the connections the gateway lets in.
func admissions() (chan struct{}, func(int)) {
	admitted := make(chan struct{}, 64)
	return admitted, func(delta int) {
		if delta > 0 {
			select {
			case admitted <- struct{}{}:
			default: // beyond what any test waits for
			}
		}
	}
}

// waitAdmitted returns once the gateway has let n connections in.
func waitAdmitted(t *testing.T, admitted <-chan struct{}, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		select {
		case <-admitted:
		case <-time.After(10 * time.Second):
			t.Fatalf("the gateway let in %d of %d connections", i, n)
		}
	}
}

// refusedWith reads the answer to a refused connection.
func refusedWith(t *testing.T, gw *gateway) *http.Response {
	t.Helper()
	c, err := net.DialTimeout("tcp", gw.addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer from a refused connection: %v", err)
	}
	// Read the body before the deferred Close.
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the refusal: %v", err)
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp
}

func TestPerClientLimit(t *testing.T) {
	up := newUpstream(t, false, nil)
	var mu sync.Mutex
	var limited []Code
	admitted, connection := admissions()
	gw := startGateway(t, gatewayConfig{
		allow:  []string{"*"},
		exempt: []string{up.hostPort()},
		limits: Limits{MaxConnsPerClient: 2},
		observer: Observer{
			Limited:    func(c Code) { mu.Lock(); limited = append(limited, c); mu.Unlock() },
			Connection: connection,
		},
	})
	held := holdConns(t, gw, 2)
	waitAdmitted(t, admitted, 2)
	denialOf(t, refusedWith(t, gw), http.StatusTooManyRequests, CodeTooManyConnsPerClient)
	mu.Lock()
	if len(limited) != 1 || limited[0] != CodeTooManyConnsPerClient {
		t.Errorf("observer saw %v", limited)
	}
	mu.Unlock()

	// Closing one frees its slot.
	held[0].Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := gw.client(t, nil).Get(up.URL)
		if err == nil && resp.StatusCode == 200 {
			resp.Body.Close()
			break
		}
		if err == nil {
			resp.Body.Close()
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot not freed: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestOverallLimit(t *testing.T) {
	admitted, connection := admissions()
	gw := startGateway(t, gatewayConfig{allow: []string{"*"}, limits: Limits{MaxConns: 3}, observer: Observer{Connection: connection}})
	holdConns(t, gw, 3)
	waitAdmitted(t, admitted, 3)
	denialOf(t, refusedWith(t, gw), http.StatusServiceUnavailable, CodeTooManyConns)
}

// TestSlowlorisCutOff: a client that never finishes its header is cut off
// after the header timeout instead of holding a connection forever.
func TestSlowlorisCutOff(t *testing.T) {
	gw := startGateway(t, gatewayConfig{allow: []string{"*"}, timeouts: Timeouts{ReadHeader: 300 * time.Millisecond}})
	c := holdConns(t, gw, 1)[0]
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	for i := 0; i < 50; i++ {
		if _, err := c.Write([]byte("X")); err != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
		if time.Since(start) > 2*time.Second {
			break
		}
	}
	_, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the gateway kept a slow client's connection open")
	}
}
