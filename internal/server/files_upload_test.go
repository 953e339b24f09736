package server_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/manager"
	"github.com/airlockhq/airlock/internal/testenv"
)

// An uploaded file past the node's bound (the one the E2B plane has too) is refused
// with 413, and the file is as it was.
func TestUploadBound(t *testing.T) {
	n := testenv.NewFakeNode(t, testenv.FakeOptions{Config: func(c *manager.Config) { c.MaxFileUpload = 6 }})
	c := n.Client
	if _, err := c.Create(bg, api.CreateSandboxRequest{Name: "box"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Upload(bg, "box", "/f", 0o644, strings.NewReader("hello\n")); err != nil {
		t.Fatalf("an upload of the bound's size: %v", err)
	}
	_, err := c.Upload(bg, "box", "/f", 0o644, strings.NewReader("too long"))
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != 413 || ce.Code != "invalid_argument" || !strings.Contains(ce.Message, "at most 6 bytes") {
		t.Errorf("an upload past the bound: %v; want 413 invalid_argument saying the bound", err)
	}
	var got bytes.Buffer
	if _, err := c.Download(bg, "box", "/f", &got); err != nil || got.String() != "hello\n" {
		t.Errorf("after the refused upload /f holds %q (%v); want hello", got.String(), err)
	}
}
