package durable

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f.json")
	for _, content := range []string{"first", "second, longer than the first"} {
		if err := WriteFile(path, []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != content {
			t.Fatalf("read back %q, %v; want %q", got, err, content)
		}
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o640 {
		t.Fatalf("mode %v, %v; want 0640", st.Mode(), err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("the directory holds %d entries, want only the file (no temp left)", len(entries))
	}
	if err := WriteFile(filepath.Join(dir, "missing", "f"), []byte("x"), 0o600); err == nil {
		t.Fatal("a write into a missing directory succeeded")
	}
}

func TestReplaceDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "d")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "old"), []byte("old"), 0o644)
	failed := errors.New("fill failed")
	err := ReplaceDir(dir, func(d string) error {
		os.MkdirAll(d, 0o755)
		os.WriteFile(filepath.Join(d, "half"), nil, 0o644)
		return failed
	})
	if !errors.Is(err, failed) {
		t.Fatalf("ReplaceDir with a failing fill: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "old")); err != nil {
		t.Errorf("the old directory was not put back: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "half")); err == nil {
		t.Error("what the failed fill made is still there")
	}
	if err := ReplaceDir(dir, func(d string) error {
		os.MkdirAll(d, 0o755)
		return os.WriteFile(filepath.Join(d, "new"), nil, 0o644)
	}); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(filepath.Dir(dir))
	if _, err := os.Stat(filepath.Join(dir, "new")); err != nil || len(entries) != 1 {
		t.Errorf("after a replace: new %v, %d entries beside it; want the new one alone", err, len(entries))
	}
}
