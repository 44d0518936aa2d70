package service

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkServiceHTTP measures the decision service over real HTTP on
// loopback: eight keep-alive connections POSTing remote-sandbox events,
// the token checked on each. The client writes prepared requests on raw
// connections so that the figure is the service's, not net/http's client.
// It reports decisions per second.
func BenchmarkServiceHTTP(b *testing.B) {
	f := start(b, basePolicy, nil)
	body := remoteEvent("read_file", `{"path": "/workspace/src/main.go"}`)
	host := strings.TrimPrefix(f.url, "http://")
	request := fmt.Sprintf("POST /v1/hooks/pre_tool_execution HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", host, token, len(body), body)
	const conns = 8
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", host)
			if err != nil {
				b.Error(err)
				return
			}
			defer c.Close()
			r := bufio.NewReader(c)
			for next.Add(1) <= int64(b.N) {
				if _, err := io.WriteString(c, request); err != nil {
					b.Error(err)
					return
				}
				resp, err := http.ReadResponse(r, nil)
				if err != nil {
					b.Error(err)
					return
				}
				got, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if string(got) != "{\"decision\":\"allow\"}\n" {
					b.Errorf("answer %q", got)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "decisions/s")
}
