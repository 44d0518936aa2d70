// Package config reads the gateway's configuration file (YAML, or JSON as
// YAML's subset) strictly — unknown fields, repeated fields and values of
// the wrong type are errors, and nothing is coerced — and validates it into
// a Config whose parts are ready to use: a compiled allowlist, parsed CIDRs,
// resolved addresses. Every error names the file, the line and the field, and
// the fix where there is an obvious one.
//
// Config.Policy compiles the rules of a Config into one Policy generation —
// allowlist, address policy, what each entry adds, upstream timeouts, the
// DNS sinkhole — which the proxy and the DNS server both judge by
// (Policy.Judge), and which a reload replaces whole.
package config
