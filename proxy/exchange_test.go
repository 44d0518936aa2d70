package proxy

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/elazarl/goproxy"
)

// TestNoExchangeNoUpstream: a request that reaches the upstream side
// without the exchange its judgement left is refused at every door (the
// round-tripper, the forwarding transport's dial, goproxy's round-trip),
// never judged by whatever policy is current.
func TestNoExchangeNoUpstream(t *testing.T) {
	gw := startGateway(t, gatewayConfig{allow: []string{"*"}})
	r, err := http.NewRequest(http.MethodGet, "http://example.com/", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (exchangeTransport{}).RoundTrip(r); !errors.Is(err, errUnjudged) {
		t.Errorf("round-tripper: %v, want errUnjudged", err)
	}
	if _, err := gw.srv.dialUpstream(context.Background(), "tcp", "example.com:80"); !errors.Is(err, errUnjudged) {
		t.Errorf("dial: %v, want errUnjudged", err)
	}
	if _, err := (forwardTripper{}).RoundTrip(r, &goproxy.ProxyCtx{Req: r}); !errors.Is(err, errUnjudged) {
		t.Errorf("goproxy round-trip: %v, want errUnjudged", err)
	}
}
