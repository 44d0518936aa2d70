package config

import "github.com/hookgate/hookgate/internal/srcpos"

// Error is one problem in a configuration file, written
// "file:line: field: message"; it is the same type as hooks.json's
// problems, so both read alike. Config's problems have no column and no
// severity: errors and warnings are kept in separate lists.
type Error = srcpos.Error

// Errors is every problem found in one file, in file order.
type Errors = srcpos.Errors
