package config

import (
	"testing"
	"time"
)

func TestLoadTimeouts(t *testing.T) {
	c, err := Load("testdata/timeouts.yaml", Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := Timeouts{Resolve: 2 * time.Second, Dial: 3 * time.Second, TLSHandshake: 4 * time.Second,
		ResponseHeader: 90 * time.Second, TunnelIdle: time.Hour}
	if c.Timeouts != want {
		t.Errorf("timeouts = %+v, want %+v", c.Timeouts, want)
	}
	if len(c.Entries) != 2 || c.Entries[0].ResponseHeaderTimeout != 0 || c.Entries[1].ResponseHeaderTimeout != 10*time.Minute {
		t.Errorf("entries = %+v, want only llm.example.com with a 10m response_header", c.Entries)
	}
	if c.DNSDenied != DNSDeniedSinkhole {
		t.Errorf("dns.denied = %q", c.DNSDenied)
	}
}

// TestTimeoutDefaults: a file without a timeouts block keeps the gateway's
// behaviour from before they were configurable, and DNS refuses.
func TestTimeoutDefaults(t *testing.T) {
	c, err := Load("testdata/good.yaml", Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := Timeouts{Resolve: 5 * time.Second, Dial: 10 * time.Second, TLSHandshake: 10 * time.Second,
		ResponseHeader: 60 * time.Second, TunnelIdle: 10 * time.Minute}
	if c.Timeouts != want {
		t.Errorf("timeouts = %+v, want %+v", c.Timeouts, want)
	}
	for i, e := range c.Entries {
		if e.ResponseHeaderTimeout != 0 {
			t.Errorf("entry %d has response_header %v", i, e.ResponseHeaderTimeout)
		}
	}
	if c.DNSDenied != DNSDeniedRefuse {
		t.Errorf("dns.denied = %q, want %q", c.DNSDenied, DNSDeniedRefuse)
	}
}

func TestShortDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Hour: "1h", 24 * time.Hour: "24h", 5 * time.Minute: "5m", time.Minute: "1m",
		90 * time.Second: "1m30s", 1500 * time.Millisecond: "1.5s",
	} {
		if got := shortDuration(d); got != want {
			t.Errorf("shortDuration(%v) = %q, want %q", d, got, want)
		}
	}
}
