// Package openapi owns the machine-readable contract of the public read API: the
// OpenAPI 3.1 document served at GET /openapi.json.
//
// The document is hand-written JSON embedded at build time; change it together
// with the server. Tests in other packages check real responses against it
// with package openapitest.
package openapi

import _ "embed"

//go:embed openapi.json
var document []byte

// Document returns the OpenAPI 3.1 document describing the public read API.
// The caller gets its own copy and may modify it.
func Document() []byte {
	return append([]byte(nil), document...)
}
