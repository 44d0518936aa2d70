package hookhttp

import (
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestProxyCredentialsCarried: a hook's request names its sandbox's tenant
// to the gateway with the credentials in the proxy URL (as HTTPS_PROXY
// carries them), and no error quotes them.
func TestProxyCredentialsCarried(t *testing.T) {
	const pass = "hg-canary-hook-proxy-pass-41d2"
	var mu sync.Mutex
	var seen []string
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Proxy-Authorization"))
		mu.Unlock()
		w.Header().Set("Proxy-Authenticate", `Basic realm="hookgate"`)
		w.WriteHeader(http.StatusProxyAuthRequired)
	}))
	t.Cleanup(proxy.Close)
	target, ca := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	proxyURL := strings.Replace(proxy.URL, "http://", "http://team-a:"+pass+"@", 1)
	c := newClient(t, Options{CAFile: ca, Proxy: proxyURL, MaxRetries: -1})
	defer c.Close()
	_, err := post(t, c, target.URL, 5*time.Second)
	if err == nil {
		t.Fatal("a 407 from the proxy was taken for an answer")
	}
	if strings.Contains(err.Error(), pass) {
		t.Fatal("the error quotes the proxy password")
	}
	mu.Lock()
	defer mu.Unlock()
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte("team-a:"+pass))
	if len(seen) == 0 || seen[0] != want {
		t.Fatal("the CONNECT did not carry the proxy URL's credentials")
	}
	if _, err := New(Options{Proxy: "team-a:" + pass + "@gateway:3128x"}); err == nil || strings.Contains(err.Error(), pass) {
		t.Fatalf("a malformed proxy URL: the error is missing or quotes the password")
	}
}
