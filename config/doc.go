// Package config reads the gateway's configuration file (YAML, or JSON as
// YAML's subset) strictly — unknown fields, repeated fields and values of
// the wrong type are errors, and nothing is coerced — and validates it into
// a Config whose parts are ready to use: a compiled allowlist, parsed CIDRs,
// resolved addresses. Every error names the file, the line and the field, and
// the fix where there is an obvious one.
package config
