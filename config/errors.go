package config

import "github.com/floodgate-go/floodgate/internal/yamlpos"

// A Pos is a place in a configuration file: the file's name as given to
// Parse or Load, and a 1-based line and column. Its String is
// "file:line:column", the form editors and terminals turn into a link.
type Pos = yamlpos.Pos

// An Error is one problem in a configuration file: where it is, the path of
// the field (e.g. "policies.api.rate" or "proxy.routes[2].limits[0].key"),
// what to change, and the underlying error if any (for errors.Is).
type Error = yamlpos.Error

// Errors is every problem found in one load, in file order. Parse and Load
// return it (as an error) so that one run of `floodgate validate` shows
// everything to fix, not just the first thing.
type Errors = yamlpos.Errors
