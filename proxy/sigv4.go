package proxy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/hookgate/hookgate/transform"
)

// MaxSignedBody bounds the request body the gateway buffers to hash for a
// SigV4 signature (services other than S3, which takes UNSIGNED-PAYLOAD).
const MaxSignedBody = 8 << 20

// CodeBodyTooLarge refuses a request whose body must be hashed for its
// signature and is larger than MaxSignedBody.
const CodeBodyTooLarge Code = "request-body-too-large"

// unsignedPayload is the payload hash of a request whose body is not
// signed, for the services that accept it.
const unsignedPayload = "UNSIGNED-PAYLOAD"

// acceptsUnsignedPayload reports whether a service takes UNSIGNED-PAYLOAD
// (S3 and its variants do; most services need the body's hash).
func acceptsUnsignedPayload(service string) bool {
	return service == "s3" || service == "s3-object-lambda" || service == "s3express"
}

// hashBody readies the body of a request of an aws_sigv4 entry for its
// signature: for S3 nothing is read (UNSIGNED-PAYLOAD); otherwise the body
// is read, at most MaxSignedBody bytes (413 past it, with nothing sent), and
// its SHA-256 kept for the signature. Nothing to do outside the entry's
// scope or without aws_sigv4.
func (ex *exchange) hashBody(r *http.Request) *denial {
	if ex.bare || ex.entry == nil {
		return nil
	}
	sig := ex.entry.Transform.AWSSigV4()
	if sig == nil {
		return nil
	}
	if acceptsUnsignedPayload(sig.Service) {
		ex.payloadHash = unsignedPayload
		return nil
	}
	var body []byte
	if r.Body != nil && r.Body != http.NoBody {
		b, err := io.ReadAll(io.LimitReader(r.Body, MaxSignedBody+1))
		if err != nil {
			return requestFailure(err, r, ex.host)
		}
		if len(b) > MaxSignedBody {
			return deny(CodeBodyTooLarge, http.StatusRequestEntityTooLarge, ex.host,
				"the request body is hashed for its AWS signature and may be at most %d bytes", MaxSignedBody)
		}
		body = b
	}
	sum := sha256.Sum256(body)
	ex.payloadHash = hex.EncodeToString(sum[:])
	r.ContentLength = int64(len(body))
	r.TransferEncoding = nil
	r.Header.Del("Expect") // the body is here: nothing to wait for
	if len(body) == 0 {
		r.Body = http.NoBody
	} else {
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	return nil
}

// sign signs an outgoing request of an aws_sigv4 entry, once its header,
// URL and Host are final: the sandbox's signature headers are already gone
// (transform.Rules.Apply), its presigned-URL parameters are removed here.
func (ex *exchange) sign(r *http.Request) *denial {
	if ex.bare || ex.entry == nil || ex.payloadHash == "" {
		return nil
	}
	sig := ex.entry.Transform.AWSSigV4()
	if sig == nil {
		return nil
	}
	stripPresigned(r)
	r.Header.Set("X-Amz-Content-Sha256", ex.payloadHash)
	creds := aws.Credentials{AccessKeyID: sig.AccessKeyID.Reveal(), SecretAccessKey: sig.SecretAccessKey.Reveal(),
		SessionToken: sig.SessionToken.Reveal()}
	err := v4.NewSigner().SignHTTP(r.Context(), creds, r, ex.payloadHash, sig.Service, sig.Region, time.Now(),
		func(o *v4.SignerOptions) { o.DisableURIPathEscaping = acceptsUnsignedPayload(sig.Service) })
	if err != nil {
		return deny(CodeUpstreamCredential, http.StatusBadGateway, ex.host, "the request could not be signed for %s", ex.host)
	}
	ex.d.injected = append(ex.d.injected, "Authorization")
	return nil
}

// stripPresigned removes a presigned URL's signature parameters, so that
// the upstream judges the gateway's signature alone.
func stripPresigned(r *http.Request) {
	if r.URL.RawQuery == "" {
		return
	}
	var kept []string
	for _, pair := range strings.Split(r.URL.RawQuery, "&") {
		name, _, _ := strings.Cut(pair, "=")
		if transform.IsSigV4Part(name) {
			continue
		}
		kept = append(kept, pair)
	}
	r.URL.RawQuery = strings.Join(kept, "&")
}
