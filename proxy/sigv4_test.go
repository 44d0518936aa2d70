package proxy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/transform"
)

const sigAccessKey = "AKIDEXAMPLECANARY"

// verifySigV4 recomputes the signature of r with the SDK, from the headers
// r says it signed and the credentials the gateway holds, and reports
// whether it equals the one r carries, and why not.
func verifySigV4(r *http.Request, body []byte, service string) (bool, string) {
	auth := r.Header.Get("Authorization")
	if !strings.HasPrefix(auth, "AWS4-HMAC-SHA256 Credential="+sigAccessKey+"/") {
		return false, "no SigV4 Authorization with the configured access key"
	}
	_, signedList, ok := strings.Cut(auth, "SignedHeaders=")
	if !ok {
		return false, "no SignedHeaders"
	}
	signedList, _, _ = strings.Cut(signedList, ",")
	when, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return false, "bad X-Amz-Date"
	}
	hash := r.Header.Get("X-Amz-Content-Sha256")
	if service != "s3" {
		sum := sha256.Sum256(body)
		if hash != hex.EncodeToString(sum[:]) {
			return false, "the payload hash is not the body's"
		}
	} else if hash != "UNSIGNED-PAYLOAD" {
		return false, "S3 request not UNSIGNED-PAYLOAD"
	}
	re, _ := http.NewRequest(r.Method, "https://"+r.Host+r.RequestURI, bytes.NewReader(body))
	re.Host = r.Host
	re.ContentLength = r.ContentLength
	for _, name := range strings.Split(signedList, ";") {
		if name == "host" || name == "content-length" {
			continue
		}
		re.Header[http.CanonicalHeaderKey(name)] = r.Header.Values(name)
	}
	err = v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: sigAccessKey, SecretAccessKey: canary, SessionToken: "sess-" + canary},
		re, hash, service, "eu-west-1", when, func(o *v4.SignerOptions) { o.DisableURIPathEscaping = service == "s3" })
	if err != nil {
		return false, "sign: " + err.Error()
	}
	if re.Header.Get("Authorization") != auth {
		return false, "signature mismatch"
	}
	return true, ""
}

func TestSigV4SignsVerifiably(t *testing.T) {
	for _, service := range []string{"bedrock", "s3"} {
		t.Run(service, func(t *testing.T) {
			type result struct {
				ok     bool
				why    string
				tokens int
				query  string
			}
			results := make(chan result, 4)
			env := newMITMEnv(t, func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				ok, why := verifySigV4(r, body, service)
				results <- result{ok, why, len(r.Header.Values("X-Amz-Security-Token")), r.URL.RawQuery}
				w.Header().Set("X-Echo", r.Header.Get("X-Amz-Security-Token"))
				_, _ = io.WriteString(w, "sess-"+canary)
			}, func(gc *gatewayConfig) {
				gc.entries = []config.Entry{{Transform: compileSpec(t, transform.Spec{SigV4: &transform.AWSSigV4Spec{
					Region: "eu-west-1", Service: service, AccessKeyID: sigAccessKey,
					SecretAccessKey: "${env:CANARY}", SessionToken: "sess-${env:CANARY}"}})}}
			})
			c := env.client(t)
			req, _ := http.NewRequest(http.MethodPost, env.url("telemetry.example.com", "/model/x/invoke?b=2&X-Amz-Signature=forged&a=1"),
				strings.NewReader(`{"prompt":"hi"}`))
			req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=SANDBOX/x, SignedHeaders=host, Signature=00")
			req.Header.Set("X-Amz-Date", "20000101T000000Z")
			req.Header.Set("X-Amz-Meta-Note", "kept")
			req.Header.Set("Content-Type", "application/json")
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			res := <-results
			if resp.StatusCode != 200 || !res.ok || res.tokens != 1 || res.query != "a=1&b=2" {
				t.Fatalf("status %d; signature verified: %v (%s); %d session tokens; query %q", resp.StatusCode, res.ok, res.why, res.tokens, res.query)
			}
			if strings.Contains(string(body), canary) || resp.Header.Get("X-Echo") != "[redacted]" {
				t.Fatal("an echoed session token reached the client")
			}
			if got := env.up.requests()[0].Header.Get("X-Amz-Meta-Note"); got != "kept" {
				t.Fatalf("the request's own X-Amz-Meta-Note became %q", got)
			}
			d := env.gw.logs.waitDecisions(t, 1)[0]
			if fmt.Sprint(d["injected"]) != "[Authorization]" {
				t.Fatalf("decision = %v", d)
			}
			env.assertNoCanary(t)
		})
	}
}

func TestSigV4BodyBound(t *testing.T) {
	env := newMITMEnv(t, echoAuth, func(gc *gatewayConfig) {
		gc.entries = []config.Entry{{Transform: compileSpec(t, transform.Spec{SigV4: &transform.AWSSigV4Spec{
			Region: "eu-west-1", Service: "bedrock", AccessKeyID: sigAccessKey, SecretAccessKey: "${env:CANARY}"}})}}
	})
	req, _ := http.NewRequest(http.MethodPut, env.url("telemetry.example.com", "/big"), io.MultiReader(
		strings.NewReader(strings.Repeat("x", MaxSignedBody)), strings.NewReader("y")))
	resp, err := env.client(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || resp.Header.Get(HeaderProxyError) != string(CodeBodyTooLarge) || len(env.up.requests()) != 0 {
		t.Fatalf("got %d %s, %d forwarded", resp.StatusCode, resp.Header.Get(HeaderProxyError), len(env.up.requests()))
	}
}
