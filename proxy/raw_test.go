package proxy

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/config"
)

// sshLikeServer speaks first, as an SSH server does: it sends its banner,
// reads the client's, and answers "ok:<client banner>". It returns its port.
func sshLikeServer(t *testing.T) (string, uint16) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for i := 0; i < 16; i++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				_, _ = c.Write([]byte("SSH-2.0-OpenSSH_9.6 hookgate-test\r\n"))
				line, err := bufio.NewReader(c).ReadString('\n')
				if err != nil {
					return
				}
				_, _ = c.Write([]byte("ok:" + line))
			}()
		}
	}()
	addr := ln.Addr().String()
	_, p, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	return addr, uint16(n)
}

// connectRaw opens CONNECT host:port through the gateway and returns the
// connection, its reader and the status of the answer.
func connectRaw(t *testing.T, g *gateway, hostPort string) (net.Conn, *bufio.Reader, int) {
	t.Helper()
	c, err := net.DialTimeout("tcp", g.addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", hostPort, hostPort)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatal(err)
	}
	return c, br, resp.StatusCode
}

func TestRawTunnelOnAllowedPortOnly(t *testing.T) {
	sshAddr, sshPort := sshLikeServer(t)
	otherAddr, otherPort := sshLikeServer(t)
	g := startGateway(t, gatewayConfig{
		allow:  []string{"git.example.com", "tls-only.example.com"},
		exempt: []string{sshAddr, otherAddr},
		names: map[string][]string{
			"git.example.com":      {"127.0.0.1"},
			"tls-only.example.com": {"127.0.0.1"},
		},
		entries: []config.Entry{{Ports: []uint16{443}, RawPorts: []uint16{sshPort}}},
	})

	// The allowed raw port: the server's banner comes through before the
	// client sends anything, and the exchange goes both ways.
	c, br, status := connectRaw(t, g, "git.example.com:"+strconv.Itoa(int(sshPort)))
	if status != 200 {
		t.Fatalf("CONNECT to the raw port: %d", status)
	}
	banner, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(banner, "SSH-2.0-OpenSSH_9.6") {
		t.Fatalf("banner %q, %v", banner, err)
	}
	fmt.Fprintf(c, "SSH-2.0-client\r\n")
	if reply, err := br.ReadString('\n'); err != nil || reply != "ok:SSH-2.0-client\r\n" {
		t.Fatalf("reply %q, %v", reply, err)
	}
	c.Close()
	d := g.logs.waitDecisions(t, 1)[0]
	if d["mode"] != modeRaw || d["verdict"] != "allow" || d["upstream"] != sshAddr {
		t.Fatalf("decision = %v", d)
	}

	// Another port of the same entry: not among its ports, refused before
	// anything is dialled.
	_, _, status = connectRaw(t, g, "git.example.com:"+strconv.Itoa(int(otherPort)))
	if status != 403 {
		t.Fatalf("CONNECT to a port the entry does not open: %d", status)
	}
	if d := g.logs.waitDecisions(t, 2)[1]; d["code"] != string(CodeAllowlist) || !strings.Contains(fmt.Sprint(d["reason"]), "not among the ports") {
		t.Fatalf("decision = %v", d)
	}

	// An entry without raw_ports keeps requiring TLS: the server's banner
	// never reaches the client, whose first bytes are refused.
	c, br, status = connectRaw(t, g, "tls-only.example.com:"+strconv.Itoa(int(otherPort)))
	if status != 200 {
		t.Fatalf("CONNECT to a TLS-only entry: %d", status)
	}
	fmt.Fprintf(c, "SSH-2.0-client\r\n")
	rest, _ := br.ReadString('\n')
	if strings.Contains(rest, "SSH-2.0-OpenSSH") {
		t.Fatal("a non-TLS tunnel reached the server of a TLS-only entry")
	}
	if d := g.logs.waitDecisions(t, 3)[2]; d["code"] != string(CodeProtocol) {
		t.Fatalf("decision = %v", d)
	}
}
