package sidecar

import (
	"net/http"
	"strconv"

	"github.com/batonhq/baton/api"
)

// serveOpenAPI serves GET /v1/openapi.json: the API reference, [api.OpenAPI].
func serveOpenAPI(w http.ResponseWriter, r *http.Request) error {
	if _, err := queryParams(r); err != nil {
		return err
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(api.OpenAPI)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(api.OpenAPI)
	return nil
}
