package jsonbody_test

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/jsonbody"
)

type nopWriter struct{}

func (nopWriter) Header() http.Header         { return http.Header{} }
func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }
func (nopWriter) WriteHeader(int)             {}

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		name, body, want string // want: a part of the error, "" for none
		o                jsonbody.Options
	}{
		{"one object", `{"name":"a"}`, "", jsonbody.Options{}},
		{"empty", ``, "is empty", jsonbody.Options{}},
		{"two values", `{"name":"a"}{"name":"b"}`, "more than one JSON value", jsonbody.Options{}},
		{"unknown field", `{"name":"a","bogus":1}`, "unknown field", jsonbody.Options{}},
		{"not JSON", `name=a`, "invalid request body", jsonbody.Options{}},
		{"too large", `{"name":"` + strings.Repeat("a", jsonbody.MaxBytes) + `"}`, "larger than", jsonbody.Options{}},
		{"unknown field allowed", `{"name":"a","bogus":1}`, "", jsonbody.Options{AllowUnknown: true}},
		{"empty allowed", ``, "", jsonbody.Options{Optional: true}},
		{"two values, lax", `{}{}`, "more than one JSON value", jsonbody.Options{AllowUnknown: true, Optional: true}},
	} {
		var req api.CreateSandboxRequest
		r := httptest.NewRequest(http.MethodPost, "/v1/sandboxes", strings.NewReader(tc.body))
		err := jsonbody.Decode(httptest.NewRecorder(), r, &req, tc.o)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v, want no error", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		case tc.want != "" && !errors.Is(err, errdefs.ErrInvalidArgument):
			t.Errorf("%s: %v is not invalid_argument", tc.name, err)
		}
		if tooLarge := errors.Is(err, jsonbody.ErrTooLarge); tooLarge != (tc.name == "too large") {
			t.Errorf("%s: errors.Is(%v, ErrTooLarge) = %v", tc.name, err, tooLarge)
		}
	}
}

func FuzzDecodeCreate(f *testing.F) {
	f.Add([]byte(`{"name":"a","limits":{"cpu":1}}`))
	f.Add([]byte(`{"name":"a","bogus":1}`))
	f.Add([]byte(`{"name":"a"}{"name":"b"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		// Room for every field of the request; a longer body takes long to minimize.
		if len(body) > 512 {
			return
		}
		var req api.CreateSandboxRequest
		r := httptest.NewRequest(http.MethodPost, "/v1/sandboxes", bytes.NewReader(body))
		err := jsonbody.Decode(nopWriter{}, r, &req, jsonbody.Options{})
		if err == nil && strings.Contains(string(body), `"bogus"`) && !strings.Contains(string(body), `\`) {
			// An unknown top-level field must never be accepted silently.
			var probe map[string]any
			if yaml.Unmarshal(body, &probe) == nil {
				if _, ok := probe["bogus"]; ok {
					t.Fatalf("accepted an unknown field: %s", body)
				}
			}
		}
	})
}
