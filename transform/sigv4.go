package transform

import (
	"fmt"
	"strings"
)

// AWSSigV4Spec is an entry's aws_sigv4: the credentials every request is
// signed with (AWS Signature Version 4). The keys and the session token take
// references; region and service are configuration.
type AWSSigV4Spec struct {
	Region, Service                            string
	AccessKeyID, SecretAccessKey, SessionToken string
	Line                                       int
}

// AWSSigV4 is a compiled aws_sigv4 credential. The package does not sign
// (the proxy does, with the AWS SDK's signer); it holds the resolved keys,
// which print "[redacted]".
type AWSSigV4 struct {
	Region, Service string
	AccessKeyID     Secret
	SecretAccessKey Secret
	SessionToken    Secret // empty: none
}

// String names the region and service, never a key.
func (a *AWSSigV4) String() string {
	if a == nil {
		return "transform.AWSSigV4(nil)"
	}
	return "transform.AWSSigV4(" + a.Service + "/" + a.Region + ")"
}

// Format prints String for every verb.
func (a *AWSSigV4) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(a.String())) }

// AWSSigV4 returns the entry's aws_sigv4 credential; nil when it has none.
func (r *Rules) AWSSigV4() *AWSSigV4 {
	if r == nil {
		return nil
	}
	return r.sigv4
}

// addSigV4 compiles an aws_sigv4 credential. Its secrets are the resolved
// parts of the keys and the token, and the whole values.
func (r *Rules) addSigV4(a AWSSigV4Spec, opts Options, out *added) error {
	fail := func(field string, err error) error {
		return &CredentialError{Kind: "aws_sigv4", Name: field, Line: a.Line, Field: field, Err: err}
	}
	if r.oauth2 != nil {
		return fail("region", fmt.Errorf("%w: aws_sigv4 sets Authorization, which oauth2 sets too", ErrDuplicate))
	}
	for _, h := range r.headers {
		if SameHeaderName(h.name, "Authorization") {
			return fail("region", fmt.Errorf("%w: aws_sigv4 sets Authorization, which the transform or basic sets too", ErrDuplicate))
		}
	}
	for field, v := range map[string]string{"region": a.Region, "service": a.Service} {
		if v == "" || strings.ContainsAny(v, " /\t") || indexCTL(v) >= 0 {
			return fail(field, fmt.Errorf("%w: want a name such as us-east-1 or s3", ErrInvalidValue))
		}
	}
	sig := &AWSSigV4{Region: a.Region, Service: a.Service}
	for _, k := range []struct {
		field, written string
		dst            *Secret
		optional       bool
	}{
		{"access_key_id", a.AccessKeyID, &sig.AccessKeyID, false},
		{"secret_access_key", a.SecretAccessKey, &sig.SecretAccessKey, false},
		{"session_token", a.SessionToken, &sig.SessionToken, true},
	} {
		if k.optional && k.written == "" {
			continue
		}
		res, err := resolve(k.written, opts)
		if err != nil {
			return fail(k.field, err)
		}
		*k.dst = newSecret(res.value)
		if len(res.parts) > 0 {
			out.secrets = append(out.secrets, res.parts...)
			out.secrets = append(out.secrets, res.value)
		}
		out.envNames = append(out.envNames, res.envNames...)
	}
	r.sigv4 = sig
	return nil
}

// sigV4Parts are the headers (and presigned-URL query parameters) that make
// up a SigV4 signature: a request of an aws_sigv4 entry loses the sandbox's
// copies of all of them before it is signed. Other X-Amz-* headers (S3's
// metadata, ACLs) are the request's own and stay.
var sigV4Parts = []string{
	"X-Amz-Algorithm", "X-Amz-Content-Sha256", "X-Amz-Credential", "X-Amz-Date",
	"X-Amz-Expires", "X-Amz-Security-Token", "X-Amz-Signature", "X-Amz-SignedHeaders",
}

// IsSigV4Part reports whether a header or query parameter name is part of a
// SigV4 signature (compared as SameHeaderName does).
func IsSigV4Part(name string) bool {
	for _, p := range sigV4Parts {
		if SameHeaderName(name, p) {
			return true
		}
	}
	return false
}
