package transform

import "errors"

// ErrLiteralSecret: a value that must come from a reference was written
// out in the file itself.
var ErrLiteralSecret = errors.New("a secret written in the file; give it as ${file:PATH} or ${env:NAME}, or give its sha256")

// ResolveSecret resolves a credential written as references (${env:NAME},
// ${file:PATH}, possibly with literal text around them), the way header
// values are resolved. A value without any reference is refused: a
// credential the gateway checks clients against belongs in a secret store,
// not in the config file. The error names references, never values.
func ResolveSecret(written string, opts Options) (Secret, error) {
	res, err := resolve(written, opts)
	if err != nil {
		return Secret{}, err
	}
	if len(res.parts) == 0 {
		return Secret{}, ErrLiteralSecret
	}
	return newSecret(res.value), nil
}
