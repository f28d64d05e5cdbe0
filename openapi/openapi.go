// Package openapi owns the machine-readable contract of the public read API: the
// OpenAPI 3.1 document served at GET /openapi.json.
//
// The document is hand-written JSON embedded at build time; change it together
// with the server. Tests in other packages check real responses against it
// with package openapitest.
package openapi

import (
	"bytes"
	_ "embed"
	"fmt"
)

//go:embed openapi.json
var document []byte

// Document returns the OpenAPI 3.1 document describing the public read API.
// The caller gets its own copy and may modify it.
func Document() []byte {
	return append([]byte(nil), document...)
}

// documentDefaultLimit is the per-key cap per minute the document's text states: the
// ratelimit.DefaultPerMinute of a server started without RATE_LIMIT_PER_MINUTE.
const documentDefaultLimit = 60

// defaultLimitPhrases are the document's statements of the default cap, each with a %d for it.
var defaultLimitPhrases = []string{
	"The default cap is %d requests per minute per key",
	"The per-key request cap (%d per minute by default)",
	`\"default\";q=%d;w=60`,
}

// remainingPhrase is the document's RateLimit example, one request into a window of the
// default cap: its %d is the cap less one.
const remainingPhrase = `\"default\";r=%d;t=42`

// DocumentFor is Document stating perMinute as the default per-key cap (RATE_LIMIT_PER_MINUTE),
// so that the document served says what this server does.
func DocumentFor(perMinute int) []byte {
	doc := Document()
	if perMinute <= 0 || perMinute == documentDefaultLimit {
		return doc
	}
	for _, p := range defaultLimitPhrases {
		doc = bytes.ReplaceAll(doc, fmt.Appendf(nil, p, documentDefaultLimit), fmt.Appendf(nil, p, perMinute))
	}
	return bytes.ReplaceAll(doc, fmt.Appendf(nil, remainingPhrase, documentDefaultLimit-1), fmt.Appendf(nil, remainingPhrase, perMinute-1))
}
