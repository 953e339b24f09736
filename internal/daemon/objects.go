package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/objstore"
)

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
	o, err := objstore.OpenS3(ctx, s3)
	if err != nil {
		return nil, fmt.Errorf("objects: %w", err)
	}
	log.Info("snapshots are kept in the object store", "location", o.Where())
	return o, nil
}
