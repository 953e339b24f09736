package integration

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/testenv"
)

// TestImportedImage imports a plain rootfs tarball (a static program, root-owned
// directories) through the API and runs a sandbox on it: the shared read-only layer is
// idmapped into the sandbox's range, so its root can write where the image's root could.
func TestImportedImage(t *testing.T) {
	n := testenv.NewNode(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "hello.go")
	os.WriteFile(src, []byte(`package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) > 2 && os.Args[1] == "write" {
		if err := os.WriteFile(os.Args[2], []byte("written\n"), 0o644); err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
	}
	uid := os.Getuid()
	fmt.Printf("hello from an imported image, uid %d\n", uid)
}
`), 0o644)
	bin := filepath.Join(dir, "hello")
	build := exec.Command("go", "build", "-o", bin, src)
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod")
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the image's program: %v\n%s", err, out)
	}
	prog, _ := os.ReadFile(bin)

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range []struct {
		name string
		mode int64
	}{{"bin/", 0o755}, {"etc/", 0o755}, {"root/", 0o700}, {"tmp/", 0o1777}} {
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d.name, Mode: d.mode})
	}
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "bin/hello", Mode: 0o755, Size: int64(len(prog))})
	tw.Write(prog)
	passwd := []byte("root:x:0:0:root:/root:/bin/hello\n")
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "etc/passwd", Mode: 0o644, Size: int64(len(passwd))})
	tw.Write(passwd)
	tw.Close()

	var phases []string
	img, err := n.Client.ImportImage(background, "hello", bytes.NewReader(buf.Bytes()), int64(buf.Len()), func(ev api.ImportEvent) {
		if ev.Phase != "" {
			phases = append(phases, ev.Phase)
		}
	})
	if err != nil {
		t.Fatalf("import: %v", err)
	}
	if !strings.HasPrefix(img.Digest, "sha256:") || img.Layers != 1 || len(phases) == 0 {
		t.Errorf("imported image = %+v (progress phases %v); want a digest, one layer and progress", img, phases)
	}
	sb := n.Create(t, api.CreateSandboxRequest{Name: "imported", Image: "hello"})
	if sb.ImageDigest != img.Digest {
		t.Errorf("sandbox image digest %s; want %s", sb.ImageDigest, img.Digest)
	}
	res, err := n.Client.Exec(background, sb.Name, api.ExecRequest{Argv: []string{"/bin/hello", "write", "/root/note"}})
	if err != nil || res.ExitCode != 0 || res.Stdout != "hello from an imported image, uid 0\n" {
		t.Fatalf("exec in the imported image: %v %+v", err, res)
	}
	// The root-owned, 0700 /root of the image is writable by the sandbox's root.
	var out bytes.Buffer
	if _, err := n.Client.Download(background, sb.Name, "/root/note", &out); err != nil || out.String() != "written\n" {
		t.Errorf("download /root/note: %v %q", err, out.String())
	}
	// An image in use cannot be removed; once the sandbox is gone it can.
	err = n.Client.RemoveImage(background, "hello")
	wantAPIError(t, "remove an image in use", err, 409, "failed_precondition")
	if _, err := n.Client.Terminate(background, sb.Name); err != nil {
		t.Fatal(err)
	}
	if err := n.Client.RemoveImage(background, "hello"); err != nil {
		t.Errorf("remove the image after terminate: %v", err)
	}
	_, err = n.Client.Create(background, api.CreateSandboxRequest{Name: "gone", Image: "hello", Pull: "never"})
	wantAPIError(t, "create from a removed image", err, 404, "not_found")
}

// TestFollowEvents: a follower sees a state change as it happens.
func TestFollowEvents(t *testing.T) {
	n := testenv.NewNode(t)
	sb := n.Create(t, api.CreateSandboxRequest{Name: "events"})
	past, err := n.Client.Events(background, sb.Name, 0)
	if err != nil || len(past) == 0 {
		t.Fatalf("events so far: %v, %d", err, len(past))
	}
	ctx, cancel := context.WithTimeout(background, 30*time.Second)
	defer cancel()
	got := make(chan api.Event, 16)
	go n.Client.FollowEvents(ctx, sb.Name, past[len(past)-1].Seq, func(ev api.Event) error {
		got <- ev
		return nil
	})
	time.Sleep(100 * time.Millisecond) // let the follower connect; it would also catch up
	if _, err := n.Client.Suspend(background, sb.Name); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case ev := <-got:
			if ev.Type == "state" && ev.Data["to"] == "suspended" {
				if ev.SandboxID != sb.ID || ev.Generation != 1 || ev.Cause != "suspend" {
					t.Errorf("suspended event = %+v; want sandbox %s, generation 1, cause suspend", ev, sb.ID)
				}
				return
			}
		case <-ctx.Done():
			t.Fatal("no suspended event reached the follower")
		}
	}
}
