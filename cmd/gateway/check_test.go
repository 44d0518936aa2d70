package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/ca"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// serveOnce runs serve with a config that must fail, bounded in time.
func serveOnce(t *testing.T, config string) (stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out, errOut strings.Builder
	err := run(ctx, []string{"serve", "--config", config}, strings.NewReader(""), &out, &errOut)
	code = exitCode(err, &errOut)
	return errOut.String(), code
}

// TestCheckOpensWhatServeOpens: for every file serve reads at start, a
// config whose file is missing or unusable fails check with the same message
// as serve.
func TestCheckOpensWhatServeOpens(t *testing.T) {
	const listen = "listen: {proxy: 127.0.0.1:0, admin: 127.0.0.1:0}\n"
	cases := []struct {
		name   string
		config string
		files  map[string]string // relative to the config's directory
		want   []string          // each with DIR standing for the config's directory
	}{{
		name:   "ca cert missing",
		config: listen + "ca: {cert_file: ca/ca.pem, key_file: ca/ca-key.pem}\n",
		want:   []string{"DIR/gateway.yaml: ca: DIR/ca/ca.pem does not exist; create the CA with: gateway ca init --dir DIR/ca"},
	}, {
		name:   "ca in files of other names",
		config: listen + "ca: {cert_file: my-cert.pem, key_file: my-key.pem}\n",
		want:   []string{"DIR/gateway.yaml: ca: DIR/my-cert.pem does not exist; create the CA with: gateway ca init --dir <dir> (it writes <dir>/ca.pem and <dir>/ca-key.pem"},
	}, {
		name:   "upstream CA missing",
		config: listen + "upstream: {ca_file: internal.pem}\n",
		want:   []string{"DIR/gateway.yaml: upstream.ca_file: open DIR/internal.pem: no such file or directory"},
	}, {
		name:   "upstream CA not PEM",
		config: listen + "upstream: {ca_file: internal.pem}\n",
		files:  map[string]string{"internal.pem": "not a certificate\n"},
		want:   []string{"DIR/gateway.yaml: upstream.ca_file: DIR/internal.pem holds no PEM certificate"},
	}, {
		name:   "admin token missing",
		config: listen + "admin: {token_file: token}\n",
		want:   []string{"DIR/gateway.yaml: admin.token_file: open DIR/token: no such file or directory"},
	}, {
		name:   "admin token empty",
		config: listen + "admin: {token_file: token}\n",
		files:  map[string]string{"token": "\n"},
		want:   []string{"DIR/gateway.yaml: admin.token_file: DIR/token is empty"},
	}, {
		name:   "every problem at once",
		config: listen + "ca: {cert_file: ca/ca.pem, key_file: ca/ca-key.pem}\nupstream: {ca_file: internal.pem}\nadmin: {token_file: token}\n",
		want: []string{
			"DIR/gateway.yaml: ca: DIR/ca/ca.pem does not exist",
			"DIR/gateway.yaml: upstream.ca_file: open DIR/internal.pem",
			"DIR/gateway.yaml: admin.token_file: open DIR/token",
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := filepath.Join(dir, "gateway.yaml")
			writeFile(t, cfg, tc.config)
			for name, content := range tc.files {
				writeFile(t, filepath.Join(dir, name), content)
			}
			_, checkErr, checkCode := runCLI(t, "check", "--config", cfg)
			serveErr, serveCode := serveOnce(t, cfg)
			for _, w := range tc.want {
				w = strings.ReplaceAll(w, "DIR", dir)
				if checkCode != 1 || !strings.Contains(checkErr, w) {
					t.Errorf("check: exit %d, stderr:\n%s\nwant exit 1 and:\n%s", checkCode, checkErr, w)
				}
				if serveCode != 1 || !strings.Contains(serveErr, w) {
					t.Errorf("serve: exit %d, stderr:\n%s\nwant exit 1 and:\n%s", serveCode, serveErr, w)
				}
			}
			for cmd, stderr := range map[string]string{"check": checkErr, "serve": serveErr} {
				if n := strings.Count(stderr, "ca init"); n > 1 {
					t.Errorf("%s gives the hint %d times:\n%s", cmd, n, stderr)
				}
			}
		})
	}

	t.Run("all files present", func(t *testing.T) {
		dir := t.TempDir()
		cfg := filepath.Join(dir, "gateway.yaml")
		certPath, _, err := ca.Init(filepath.Join(dir, "ca"))
		if err != nil {
			t.Fatal(err)
		}
		pem, err := os.ReadFile(certPath)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, "internal.pem"), string(pem))
		writeFile(t, filepath.Join(dir, "token"), "admin-token\n")
		writeFile(t, cfg, listen+"ca: {cert_file: ca/ca.pem, key_file: ca/ca-key.pem}\nupstream: {ca_file: internal.pem}\nadmin: {token_file: token}\n")
		out, errOut, code := runCLI(t, "check", "--config", cfg)
		if code != 0 || !strings.Contains(out, cfg+": OK") {
			t.Fatalf("check: exit %d\n%s%s", code, out, errOut)
		}
	})
}

// TestShippedConfigs: every config in configs/ either passes check or fails
// it with the message it is meant to give before its set-up steps are done.
// Each is copied to configs/ under a fresh directory, so its relative paths
// (../hookgate-ca for telemetry.yaml) land there, not in the repository.
func TestShippedConfigs(t *testing.T) {
	files, err := filepath.Glob("../../configs/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("configs/*.yaml: %v", err)
	}
	type step struct {
		env  map[string]string // "" value: unset
		init string            // ca init --dir this (relative to the copy's root) first
		want string            // "OK" or a part of check's error; DIR: the copy's root
	}
	expect := map[string][]step{
		"gateway.yaml": {{want: "OK"}},
		"tenants.yaml": {
			{env: tenantsEnv, want: "DIR/configs/tenants.yaml: ca: DIR/hookgate-ca/ca.pem does not exist"},
			{env: tenantsEnv, init: "hookgate-ca", want: "OK"},
		},
		"telemetry.yaml": {
			{env: map[string]string{"TELEMETRY_TOKEN": ""}, want: `DIR/configs/telemetry.yaml:16: network.allowlist[0].transform.Authorization: value: unresolved reference: ${env:TELEMETRY_TOKEN}: environment variable TELEMETRY_TOKEN is not set`},
			{env: map[string]string{"TELEMETRY_TOKEN": "tok"}, want: "DIR/configs/telemetry.yaml: ca: DIR/hookgate-ca/ca.pem does not exist; create the CA with: gateway ca init --dir DIR/hookgate-ca"},
			{env: map[string]string{"TELEMETRY_TOKEN": "tok"}, init: "hookgate-ca", want: "OK"},
		},
	}
	for _, f := range files {
		name := filepath.Base(f)
		steps, ok := expect[name]
		if !ok {
			t.Errorf("configs/%s: no expectation in this test; add what check must say about it", name)
			continue
		}
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			cfg := filepath.Join(root, "configs", name)
			writeFile(t, cfg, string(data))
			for i, s := range steps {
				for k, v := range s.env {
					t.Setenv(k, v)
					if v == "" {
						os.Unsetenv(k)
					}
				}
				if s.init != "" {
					if _, _, err := ca.Init(filepath.Join(root, s.init)); err != nil {
						t.Fatal(err)
					}
				}
				out, errOut, code := runCLI(t, "check", "--config", cfg)
				want := strings.ReplaceAll(s.want, "DIR", root)
				if want == "OK" {
					if code != 0 || !strings.Contains(out, cfg+": OK") {
						t.Errorf("step %d: exit %d, want OK:\n%s%s", i, code, out, errOut)
					}
					continue
				}
				if code != 1 || !strings.Contains(errOut, want) {
					t.Errorf("step %d: exit %d, stderr:\n%s\nwant:\n%s", i, code, errOut, want)
				}
			}
		})
	}
}

// TestCheckPrintsWarnings: a config that loads but holds an entry that can
// never be reached passes check, with the warning on stderr.
func TestCheckPrintsWarnings(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "gateway.yaml")
	writeFile(t, cfg, "network:\n  allowlist:\n    - domain: api.example.com\n    - domain: 169.254.169.254\n")
	out, errOut, code := runCLI(t, "check", "--config", cfg)
	want := "warning: " + cfg + ":4: network.allowlist[1].domain: 169.254.169.254 is cloud metadata, which the gateway does not dial unless network.allow_cidrs re-opens it: this entry can never be reached"
	if code != 0 || !strings.Contains(out, "OK") || !strings.Contains(errOut, want) {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s\nwant on stderr:\n%s", code, out, errOut, want)
	}
}

// TestShippedHooks: configs/hooks, meant to be mounted at /.agents, passes
// `hooks check` with no errors.
func TestShippedHooks(t *testing.T) {
	data, err := os.ReadFile("../../configs/hooks/hooks.json")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	writeFile(t, filepath.Join(root, ".agents", "hooks.json"), string(data))
	out, errOut, code := runHooksCLI(t, "", "check", "--root", root, "--workspace", t.TempDir())
	if code != 0 || !strings.Contains(out, filepath.Join(root, ".agents", "hooks.json")+"  (loaded)") || strings.Contains(out, "error:") {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
}
