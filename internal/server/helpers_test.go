package server

import (
	"bytes"
	"net/http"
	"net/http/httptest"
)

func httptestRequest(body []byte) *http.Request {
	return httptest.NewRequest(http.MethodPost, "/v1/sandboxes", bytes.NewReader(body))
}

type nopWriter struct{}

func (nopWriter) Header() http.Header         { return http.Header{} }
func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }
func (nopWriter) WriteHeader(int)             {}
