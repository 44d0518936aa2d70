package sandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hookgate/hookgate/transform"
)

// envCanary is the value of the secret the command must never see; it is
// never printed.
const envCanary = "s3cret-value-42"

func TestCommandEnv(t *testing.T) {
	vars := map[string]string{"API_TOKEN": envCanary, "other_token": "other-secret-99"}
	rules, err := transform.Compile([]transform.HeaderSpec{
		{Name: "Authorization", Value: "Bearer ${env:API_TOKEN}"},
		{Name: "X-Other", Value: "${env:other_token}"},
		{Name: "X-Literal", Value: "$${env:LITERAL_ONLY}"},
		{Name: "X-Dollar", Value: "$$${env:DOLLAR_THEN_REF}"},
	}, transform.Options{LookupEnv: func(k string) (string, bool) {
		if k == "DOLLAR_THEN_REF" {
			return "dollar-secret-7", true
		}
		v, ok := vars[k]
		return v, ok
	}})
	if err != nil {
		t.Fatal(err)
	}
	in := []string{
		"PATH=/usr/bin", "HOME=/root",
		"API_TOKEN=" + envCanary, "OTHER_TOKEN=other-secret-99", "COPY=Bearer " + envCanary,
		"LITERAL_ONLY=kept", "dollar_then_ref=x",
		"HTTP_PROXY=http://p:1", "https_proxy=http://p:1", "All_Proxy=socks5://p:1", "no_proxy=*",
		"SSL_CERT_FILE=/old.pem", "CURL_CA_BUNDLE=/old.pem",
	}
	got := CommandEnv(in, []*transform.Rules{nil, rules}, "/tmp/bundle.pem")
	want := []string{
		"PATH=/usr/bin", "HOME=/root", "LITERAL_ONLY=kept",
		"SSL_CERT_FILE=/tmp/bundle.pem", "REQUESTS_CA_BUNDLE=/tmp/bundle.pem", "NODE_EXTRA_CA_CERTS=/tmp/bundle.pem",
		"CURL_CA_BUNDLE=/tmp/bundle.pem", "GIT_SSL_CAINFO=/tmp/bundle.pem",
	}
	if !slices.Equal(got, want) {
		// got may hold the canary: say only how it differs in names.
		var names []string
		for _, kv := range got {
			k, _, _ := strings.Cut(kv, "=")
			names = append(names, k)
		}
		t.Errorf("CommandEnv: variables %q, want %q", names, want)
	}
	// Without a bundle the CA variables are left as they are.
	got = CommandEnv([]string{"SSL_CERT_FILE=/mine.pem", "HTTPS_PROXY=x"}, []*transform.Rules{rules}, "")
	if !slices.Equal(got, []string{"SSL_CERT_FILE=/mine.pem"}) {
		t.Errorf("CommandEnv without bundle: %q", got)
	}
}

func TestUserEnv(t *testing.T) {
	got := userEnv([]string{"HOME=/root", "PATH=/bin", "USER=root"}, User{UID: 1000, GID: 1000, Name: "dev", Home: "/home/dev"})
	want := []string{"PATH=/bin", "HOME=/home/dev", "USER=dev", "LOGNAME=dev"}
	if !slices.Equal(got, want) {
		t.Errorf("userEnv: %q, want %q", got, want)
	}
	// Unknown to the user database: left alone.
	in := []string{"HOME=/root"}
	if got := userEnv(in, User{UID: 54321, GID: 54321}); !slices.Equal(got, in) {
		t.Errorf("userEnv without a name: %q", got)
	}
}

func TestWriteCABundle(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	sys := filepath.Join(tmp, "system.pem")
	if err := os.WriteFile(sys, []byte("-----BEGIN CERTIFICATE-----\nsystem\n-----END CERTIFICATE-----"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SSL_CERT_FILE", sys)
	ours := filepath.Join(tmp, "ca.pem")
	if err := os.WriteFile(ours, []byte("-----BEGIN CERTIFICATE-----\nours\n-----END CERTIFICATE-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	// A bundle of a gateway that is gone, and one of a live process (our
	// parent).
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(tmp, bundlePrefix+strconv.Itoa(dead.Process.Pid)+"-1.pem")
	live := filepath.Join(tmp, bundlePrefix+strconv.Itoa(os.Getppid())+"-2.pem")
	for _, f := range []string{stale, live} {
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	path, err := WriteCABundle(ours)
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(path)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := "-----BEGIN CERTIFICATE-----\nsystem\n-----END CERTIFICATE-----\n-----BEGIN CERTIFICATE-----\nours\n-----END CERTIFICATE-----\n"; string(b) != want {
		t.Errorf("bundle:\n%s\nwant:\n%s", b, want)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("bundle mode: %v %v, want 0644", st.Mode(), err)
	}
	if !strings.HasPrefix(filepath.Base(path), bundlePrefix+strconv.Itoa(os.Getpid())+"-") || filepath.Dir(path) != tmp {
		t.Errorf("bundle path %s", path)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale bundle of a dead gateway not removed: %v", err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("bundle of a live process removed: %v", err)
	}
	if _, err := WriteCABundle(filepath.Join(tmp, "missing.pem")); err == nil || !strings.Contains(err.Error(), "ca.cert_file") {
		t.Errorf("missing CA: %v", err)
	}
}
