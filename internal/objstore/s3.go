package objstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// S3Config is how to reach a bucket. It holds credentials: never log it.
type S3Config struct {
	// Endpoint is "https://host[:port]" or, on a trusted network only, "http://host[:port]".
	Endpoint string
	Bucket   string
	Region   string
	// Prefix, if set, is put before every key ("airlock/" keeps Airlock's objects apart
	// from others in the bucket).
	Prefix string
	// CAFile, if set, is a PEM bundle trusted for the endpoint instead of the system's.
	CAFile string
	// AccessKey and SecretKey, or CredentialsFile (an AWS shared credentials file, its
	// default profile).
	AccessKey, SecretKey string
	CredentialsFile      string
}

// S3 is a Store in a bucket of an S3-compatible server (AWS S3, MinIO, Ceph RGW,
// SeaweedFS), through minio-go.
type S3 struct {
	client *minio.Client
	bucket string
	prefix string
	where  string
}

var _ Store = (*S3)(nil)

// OpenS3 connects to the bucket cfg names, creating it when it is missing. It fails
// with what was wrong: an unreachable endpoint, refused credentials, a bucket that
// cannot be made.
func OpenS3(ctx context.Context, cfg S3Config) (*S3, error) {
	u, err := url.Parse(cfg.Endpoint)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || strings.Trim(u.Path, "/") != "" || u.User != nil || u.RawQuery != "" {
		// The endpoint is not echoed: it may carry a user:password.
		return nil, errdefs.Invalid("object store endpoint must be https://HOST[:PORT] (or http:// on a trusted network), with no user, path or query")
	}
	if err := validPrefix(cfg.Prefix); err != nil {
		return nil, err
	}
	secure := u.Scheme == "https"
	tr, err := minio.DefaultTransport(secure)
	if err != nil {
		return nil, err
	}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("object store CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, errdefs.Invalid("object store CA %s holds no PEM certificate", cfg.CAFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	var creds *credentials.Credentials
	switch {
	case cfg.CredentialsFile != "":
		creds = credentials.NewFileAWSCredentials(cfg.CredentialsFile, "")
	case cfg.AccessKey != "" && cfg.SecretKey != "":
		creds = credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, "")
	default:
		return nil, errdefs.Invalid("object store needs credentials: an access key and secret key, or a credentials file")
	}
	client, err := minio.New(u.Host, &minio.Options{
		Creds: creds, Secure: secure, Transport: tr, Region: cfg.Region,
		BucketLookup: minio.BucketLookupPath, MaxRetries: 3,
	})
	if err != nil {
		return nil, fmt.Errorf("object store %s: %w", cfg.Endpoint, err)
	}
	s := &S3{client: client, bucket: cfg.Bucket, prefix: cfg.Prefix,
		where: "s3://" + cfg.Bucket + "/" + cfg.Prefix}
	ok, err := client.BucketExists(ctx, cfg.Bucket)
	if err != nil {
		return nil, fmt.Errorf("object store %s: bucket %q: %w", cfg.Endpoint, cfg.Bucket, err)
	}
	if !ok {
		err := client.MakeBucket(ctx, cfg.Bucket, minio.MakeBucketOptions{Region: cfg.Region})
		if err != nil && minio.ToErrorResponse(err).Code != minio.BucketAlreadyOwnedByYou {
			return nil, fmt.Errorf("object store %s: bucket %q does not exist and cannot be created: %w", cfg.Endpoint, cfg.Bucket, err)
		}
	}
	return s, nil
}

// Where implements Store.
func (s *S3) Where() string { return s.where }

func (s *S3) key(key string) (string, error) {
	if err := ValidKey(key); err != nil {
		return "", err
	}
	return s.prefix + key, nil
}

// notFound maps the server's "no such key" to ErrNotFound.
func notFound(err error) error {
	if err != nil && minio.ToErrorResponse(err).Code == minio.NoSuchKey {
		return ErrNotFound
	}
	return err
}

// Put implements Store.
func (s *S3) Put(ctx context.Context, key string, r io.Reader, size int64, sum string) error {
	k, err := s.key(key)
	if err != nil {
		return err
	}
	c, err := newChecked(r, size, sum)
	if err != nil {
		return err
	}
	_, err = s.client.PutObject(ctx, s.bucket, k, c, size, minio.PutObjectOptions{ContentType: "application/octet-stream"})
	if err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	// The client stops at size bytes and may drop an error that came with the last
	// ones: check what it read, and that nothing was left, after the fact, and take
	// back an object that does not match (readers check content anyway).
	if err := c.finish(); err != nil {
		s.client.RemoveObject(context.WithoutCancel(ctx), s.bucket, k, minio.RemoveObjectOptions{})
		return fmt.Errorf("put %s: %w", key, err)
	}
	return nil
}

// Get implements Store.
func (s *S3) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	k, err := s.key(key)
	if err != nil {
		return nil, err
	}
	obj, err := s.client.GetObject(ctx, s.bucket, k, minio.GetObjectOptions{})
	if err != nil {
		return nil, notFound(err)
	}
	// GetObject is lazy: Stat makes the request, so a missing object is told here.
	if _, err := obj.Stat(); err != nil {
		obj.Close()
		return nil, notFound(err)
	}
	return obj, nil
}

// Stat implements Store.
func (s *S3) Stat(ctx context.Context, key string) (Info, error) {
	k, err := s.key(key)
	if err != nil {
		return Info{}, err
	}
	oi, err := s.client.StatObject(ctx, s.bucket, k, minio.StatObjectOptions{})
	if err != nil {
		return Info{}, notFound(err)
	}
	return Info{Key: key, Size: oi.Size, Modified: oi.LastModified}, nil
}

// Delete implements Store.
func (s *S3) Delete(ctx context.Context, key string) error {
	k, err := s.key(key)
	if err != nil {
		return err
	}
	if err := notFound(s.client.RemoveObject(ctx, s.bucket, k, minio.RemoveObjectOptions{})); err != nil && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	return nil
}

// List implements Store. Keys in the bucket that are not valid keys (put there by
// something else) are skipped.
func (s *S3) List(ctx context.Context, prefix string, fn func(Info) error) error {
	if err := validPrefix(prefix); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the listing goroutine when fn stops early
	for oi := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix + prefix, Recursive: true}) {
		if oi.Err != nil {
			return fmt.Errorf("list %s: %w", prefix, oi.Err)
		}
		key, ok := strings.CutPrefix(oi.Key, s.prefix)
		if !ok || ValidKey(key) != nil {
			continue
		}
		if err := fn(Info{Key: key, Size: oi.Size, Modified: oi.LastModified}); err != nil {
			return err
		}
	}
	return ctx.Err()
}
