package api

import _ "embed"

// OpenAPI is the OpenAPI 3.1 document of the HTTP API (api/openapi.json):
// every route with its bodies, statuses, error kinds and examples, the
// op-delivery contract for app handlers (webhook opDelivery) and the
// dead-letter message format (schema DeadLetter). The sidecar serves it at
// GET /v1/openapi.json.
//
//go:embed openapi.json
var OpenAPI []byte
