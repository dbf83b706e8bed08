// Package api holds the JSON wire types of Baton's HTTP API over the unix
// socket and its error kinds; api/openapi.json ([OpenAPI]) is the reference
// of the API. It imports only the standard library, so that the sidecar,
// the Go client and other programs share one definition.
//
// Conventions: times are RFC 3339 UTC with milliseconds ([Time]); durations
// are whole milliseconds in fields ending in _ms; a fencing token is a JSON
// string of the decimal int64; a node is a name ("A-0000000007"), not a
// path. Every error answer has the shape of [Error]: {"error": kind,
// "message": text, ...}.
package api
