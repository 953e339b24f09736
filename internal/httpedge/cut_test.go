package httpedge

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// A handler that fails after its answer began returns Cut(err): no error answer is
// written into the body, and the connection ends without the answer's end, so the
// client reads an error rather than a short body that looks whole.
func TestCutAnswerEndsWithoutItsEnd(t *testing.T) {
	for _, cut := range []bool{true, false} {
		wroteErr := false
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, err := Run(w, r, func(http.ResponseWriter, *http.Request, error) { wroteErr = true },
				func(w http.ResponseWriter, r *http.Request) error {
					w.Write([]byte("the first entry"))
					http.NewResponseController(w).Flush() // chunked: no length tells the client
					if cut {
						return Cut(errors.New("the sandbox went away"))
					}
					return nil
				})
			Abort(err)
		}))
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		srv.Close()
		if string(body) != "the first entry" {
			t.Errorf("cut=%v: body %q", cut, body)
		}
		if cut && err == nil {
			t.Errorf("a cut answer read as whole; want an error at its end")
		}
		if !cut && err != nil {
			t.Errorf("a whole answer: %v", err)
		}
		if wroteErr {
			t.Errorf("cut=%v: an error answer was written after the body began", cut)
		}
	}
}
