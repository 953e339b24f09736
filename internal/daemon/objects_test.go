package daemon

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

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

// An object store that accepts connections and never answers stops the start with an
// error naming its host and the bound, instead of hanging it.
func TestOpenObjectsUnansweredEndpoint(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c) // read nothing, answer nothing
		}
	}()
	old := openObjectsTimeout
	openObjectsTimeout = 200 * time.Millisecond
	t.Cleanup(func() { openObjectsTimeout = old })
	t.Setenv("AIRLOCK_TEST_AK", "ak-value")
	t.Setenv("AIRLOCK_TEST_SK", "sk-value")
	cfg := config.Objects{Endpoint: "http://" + ln.Addr().String(), Bucket: "airlock", AccessKeyEnv: "AIRLOCK_TEST_AK", SecretKeyEnv: "AIRLOCK_TEST_SK"}
	// The test's own bound, far past the one under test.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = openObjects(ctx, cfg, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), ln.Addr().String()) || !strings.Contains(err.Error(), "did not answer within 200ms") {
		t.Fatalf("openObjects of an endpoint that never answers: %v; want an error naming %s and the 200ms bound", err, ln.Addr())
	}
	if strings.Contains(err.Error(), "sk-value") || strings.Contains(err.Error(), "ak-value") {
		t.Errorf("the error shows a key: %v", err)
	}
}
