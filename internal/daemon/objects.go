package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/objstore"
)

// openObjectsTimeout bounds the start's first calls to the object store, so an endpoint
// that does not answer stops the start with an error instead of hanging it.
var openObjectsTimeout = 30 * time.Second

// openObjects connects to the object store cfg names, making its bucket if needed. The
// keys come from the environment variables cfg names; they are never logged.
func openObjects(ctx context.Context, cfg config.Objects, log *slog.Logger) (objstore.Store, error) {
	s3 := objstore.S3Config{Endpoint: cfg.Endpoint, Bucket: cfg.Bucket, Region: cfg.Region,
		Prefix: cfg.Prefix, CAFile: cfg.CAFile, CredentialsFile: cfg.CredentialsFile}
	if cfg.CredentialsFile == "" {
		for _, e := range []struct {
			name string
			v    *string
		}{{cfg.AccessKeyEnv, &s3.AccessKey}, {cfg.SecretKeyEnv, &s3.SecretKey}} {
			if *e.v = os.Getenv(e.name); *e.v == "" {
				return nil, fmt.Errorf("objects: environment variable %s (named by the configuration) is not set", e.name)
			}
		}
	}
	if strings.HasPrefix(cfg.Endpoint, "http://") {
		log.Warn("objects.endpoint is plain HTTP: snapshot contents travel in the clear (request signatures keep the keys secret); use https:// outside a trusted network",
			"endpoint", cfg.Endpoint)
	}
	octx, cancel := context.WithTimeout(ctx, openObjectsTimeout)
	defer cancel()
	o, err := objstore.OpenS3(octx, s3)
	if err != nil && errors.Is(octx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
		// Only the host: the endpoint may carry what OpenS3 refuses to echo.
		host := "objects.endpoint"
		if u, perr := url.Parse(cfg.Endpoint); perr == nil && u.Host != "" {
			host = u.Host
		}
		return nil, errdefs.Unavailable("objects: the object store at %s did not answer within %s; check objects.endpoint and that this node reaches it", host, openObjectsTimeout)
	}
	if err != nil {
		return nil, fmt.Errorf("objects: %w", err)
	}
	log.Info("snapshots are kept in the object store", "location", o.Where())
	return o, nil
}
