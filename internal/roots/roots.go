// Package roots builds the certificate pools upstream connections trust:
// the system's roots plus the operator's extra PEM files. The gateway's
// upstream client and the hook client share it, so both read the extra file
// the same way and fail on it with the same words.
package roots

import (
	"crypto/x509"
	"fmt"
	"os"
)

// System returns a copy of the system pool, or an empty pool where the
// system has none (a pool the caller may add to either way).
func System() *x509.CertPool {
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		return x509.NewCertPool()
	}
	return pool
}

// AddFile adds the certificates of a PEM file to pool; "" adds nothing. A
// file that cannot be read, or holds no PEM certificate, is an error.
func AddFile(pool *x509.CertPool, file string) error {
	if file == "" {
		return nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	if !pool.AppendCertsFromPEM(data) {
		return fmt.Errorf("%s holds no PEM certificate", file)
	}
	return nil
}
