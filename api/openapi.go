package api

import (
	_ "embed"
	"net/http"
)

// openAPIDocument describes every route; a test keeps it and routes.go in step.
//
//go:embed openapi.yaml
var openAPIDocument []byte

func handleOpenAPI() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		_, _ = w.Write(openAPIDocument)
	})
}
