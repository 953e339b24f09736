package daemon

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/objstore/s3test"
)

func TestOpenObjects(t *testing.T) {
	cfg := config.Objects{Endpoint: "http://127.0.0.1:1", Bucket: "airlock", AccessKeyEnv: "AIRLOCK_TEST_AK", SecretKeyEnv: "AIRLOCK_TEST_SK"}
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	t.Setenv("AIRLOCK_TEST_AK", "ak")
	t.Setenv("AIRLOCK_TEST_SK", "")
	if _, err := openObjects(context.Background(), cfg, log); err == nil || !strings.Contains(err.Error(), "AIRLOCK_TEST_SK") {
		t.Errorf("openObjects without the secret key: %v; want an error naming AIRLOCK_TEST_SK", err)
	}

	srv := s3test.Start(t)
	cfg.Endpoint = srv.Endpoint
	t.Setenv("AIRLOCK_TEST_AK", srv.AccessKey)
	t.Setenv("AIRLOCK_TEST_SK", srv.SecretKey)
	o, err := openObjects(context.Background(), cfg, log)
	if err != nil {
		t.Fatalf("openObjects: %v", err)
	}
	if o.Where() != "s3://airlock/" {
		t.Errorf("Where = %q", o.Where())
	}
	if !strings.Contains(buf.String(), "plain HTTP") {
		t.Errorf("no warning for a plain-HTTP endpoint in the log:\n%s", buf.String())
	}
	if strings.Contains(buf.String(), srv.SecretKey) || strings.Contains(buf.String(), srv.AccessKey) {
		t.Errorf("the log shows a key:\n%s", buf.String())
	}
}
