// Package proxy is hookgate's egress proxy: the explicit HTTP/CONNECT
// listener, the guarded dialer that every upstream connection goes through,
// the denial answers and the one decision log line per request or tunnel.
//
// The flow for every request is the same: parse and validate the target,
// ask the allowlist, resolve the name and judge every address it resolves to
// (the guard), then dial exactly the address that was judged. goproxy does
// the HTTP forwarding; its types never leave this package.
package proxy
