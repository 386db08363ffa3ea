package config

import _ "embed"

//go:embed schema.json
var schemaJSON []byte

// Schema returns the JSON Schema (draft 2020-12) of the configuration file,
// with a description for every field, for editors that complete and check
// YAML (yaml-language-server: add
// "# yaml-language-server: $schema=PATH/schema.json" to the file). It is
// generated from the structs in this package, and a test keeps the two in
// step.
func Schema() []byte { return append([]byte(nil), schemaJSON...) }
