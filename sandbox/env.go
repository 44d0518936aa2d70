package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/hookgate/hookgate/transform"
)

// caEnv are the variables that point common tools at a CA bundle.
var caEnv = []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO"}

// proxyEnv are removed, in any case: the sandbox needs no proxy, and one
// pointing anywhere would only fail.
var proxyEnv = []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "FTP_PROXY"}

// CommandEnv is the environment of a sandboxed command: environ without
// proxy settings, without the variables the transforms read secrets from
// (transform.Rules.EnvNames, matched regardless of case) nor any variable
// whose value holds one of their secrets (the sandbox must never have
// them), and, when bundle is set, with the CA bundle variables pointing at
// it.
func CommandEnv(environ []string, transforms []*transform.Rules, bundle string) []string {
	drop := map[string]bool{}
	for _, k := range proxyEnv {
		drop[k] = true
	}
	if bundle != "" {
		for _, k := range caEnv {
			drop[k] = true
		}
	}
	var secrets []string
	for _, r := range transforms {
		for _, name := range r.EnvNames() {
			drop[strings.ToUpper(name)] = true
		}
		for _, s := range r.Secrets() {
			if v := s.Reveal(); v != "" {
				secrets = append(secrets, v)
			}
		}
	}
	out := make([]string, 0, len(environ)+len(caEnv))
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		if !drop[strings.ToUpper(k)] && !containsAny(v, secrets) {
			out = append(out, kv)
		}
	}
	if bundle != "" {
		for _, k := range caEnv {
			out = append(out, k+"="+bundle)
		}
	}
	return out
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// userEnv sets HOME, USER and LOGNAME to the user's, when the user
// database knows them: sudo leaves root's there, which the user cannot
// write to.
func userEnv(environ []string, u User) []string {
	if u.Name == "" {
		return environ
	}
	set := map[string]string{"HOME": u.Home, "USER": u.Name, "LOGNAME": u.Name}
	out := make([]string, 0, len(environ)+len(set))
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := set[k]; !ok {
			out = append(out, kv)
		}
	}
	for _, k := range []string{"HOME", "USER", "LOGNAME"} {
		out = append(out, k+"="+set[k])
	}
	return out
}

// systemBundles are the usual places of the system's PEM bundle: Debian,
// Ubuntu, Alpine; RHEL, Fedora; openSUSE; others.
var systemBundles = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
	"/etc/ssl/ca-bundle.pem",
	"/etc/ssl/cert.pem",
}

// bundlePrefix starts the name of a CA bundle; the pid of the gateway that
// wrote it follows, so that the next run can remove the bundle of a gateway
// that was killed.
const bundlePrefix = "hookgate-sandbox-ca-"

// WriteCABundle writes the system roots (the file SSL_CERT_FILE names, or
// the first of the usual places that exists) followed by the CA
// certificate in caFile to a new temporary file, world-readable (the
// command runs as another user), and returns its path; the caller removes
// it. It first removes the bundles of gateways that are gone.
func WriteCABundle(caFile string) (string, error) {
	ours, err := os.ReadFile(caFile)
	if err != nil {
		return "", fmt.Errorf("ca.cert_file: %w", err)
	}
	var system []byte
	candidates := systemBundles
	if f := os.Getenv("SSL_CERT_FILE"); f != "" {
		candidates = append([]string{f}, candidates...)
	}
	for _, f := range candidates {
		if b, err := os.ReadFile(f); err == nil {
			system = b
			break
		}
	}
	removeStaleBundles()
	f, err := os.CreateTemp("", bundlePrefix+strconv.Itoa(os.Getpid())+"-*.pem")
	if err != nil {
		return "", fmt.Errorf("CA bundle: %w", err)
	}
	name := f.Name()
	if len(system) > 0 && system[len(system)-1] != '\n' {
		system = append(system, '\n')
	}
	_, werr := f.Write(append(system, ours...))
	cerr := f.Close()
	if err := errors.Join(werr, cerr, os.Chmod(name, 0o644)); err != nil {
		_ = os.Remove(name)
		return "", fmt.Errorf("CA bundle: %w", err)
	}
	return name, nil
}

// removeStaleBundles removes the CA bundles of gateways that are gone.
func removeStaleBundles() {
	paths, _ := filepath.Glob(filepath.Join(os.TempDir(), bundlePrefix+"*-*.pem"))
	for _, p := range paths {
		pidStr, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(p), bundlePrefix), "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_ = os.Remove(p)
		}
	}
}
