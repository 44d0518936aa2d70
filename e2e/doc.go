// Package e2e holds the end-to-end tests of the gateway binary.
//
// The tests build cmd/gateway once, then run it in a network namespace of its
// own, with a test upstream (HTTP on :80, HTTPS on :443 and DNS on :53) in a
// second namespace joined to the first by a veth pair on TEST-NET-3
// (203.0.113.1 for the gateway, 203.0.113.2 for the upstream). Real clients
// (curl, and a Go client whose sockets are created in the gateway's
// namespace) talk to the gateway's explicit proxy on 127.0.0.1:3128 of that
// namespace. The upstream records every connection, request and DNS query it
// gets, so the tests can assert that a denied request never reached it and
// that a name the allowlist denies was never resolved.
//
// No traffic goes anywhere but loopback inside the namespaces and the
// 203.0.113.0/24 link between them; the namespaces have no default route.
//
// The tests need root (to create namespaces) plus the ip and curl commands.
// Without them they skip, except when CI=true, where they fail: CI must run
// them. Run them with
//
//	sudo go test -race -count=1 -v ./e2e/
//
// This package contains no product code; everything is in _test.go files.
package e2e
