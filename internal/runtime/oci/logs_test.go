package oci

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCapLogRotatesInPlace(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, agentLogName)
	// The container's descriptor: it keeps appending to the same file after a rotation.
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.Write(bytes.Repeat([]byte("a"), 3000))
	f.Write([]byte("TAIL"))
	capLog(dir, 1000)
	if fi, _ := os.Stat(path); fi.Size() != 0 {
		t.Fatalf("log past the cap is %d bytes after a sweep; want emptied", fi.Size())
	}
	old, _ := os.ReadFile(filepath.Join(dir, agentLogOldName))
	if len(old) != 1000 || !bytes.HasSuffix(old, []byte("TAIL")) {
		t.Fatalf("rotated log holds %d bytes ending %q; want the last 1000 bytes", len(old), old[max(len(old)-4, 0):])
	}
	f.Write([]byte("next"))
	if got := logTail(dir, 100); string(got) != "next" {
		t.Fatalf("after rotation the writer's next line = %q; want it at the start of the log", got)
	}
	capLog(dir, 1000) // under the cap: untouched
	if got := logTail(dir, 100); string(got) != "next" {
		t.Fatalf("a log under the cap was changed: %q", got)
	}
}

// A failed start quotes the last lines of each engine log, bounded in lines and in
// bytes per line, with control characters replaced; empty logs say nothing.
func TestEngineTailIsBounded(t *testing.T) {
	dir := t.TempDir()
	logs := filepath.Join(dir, engineLogDir)
	if err := resetEngineLogs(logs); err != nil {
		t.Fatal(err)
	}
	var boot bytes.Buffer
	for i := range 1000 {
		fmt.Fprintf(&boot, "line %d\n", i)
	}
	boot.WriteString("FATAL \x1b[31mboom" + strings.Repeat("x", 2000) + "\n")
	os.WriteFile(filepath.Join(logs, "boot.log"), boot.Bytes(), 0o600)
	os.WriteFile(filepath.Join(logs, "panic.log"), nil, 0o600)
	got := engineTail(dir, "runsc")
	lines := strings.Split(strings.TrimPrefix(got, "\n"), "\n")
	if lines[0] != "runsc boot.log, last lines:" || len(lines) != 1+engineLogLines {
		t.Fatalf("tail = %d lines starting %q; want a heading and %d lines:\n%s", len(lines), lines[0], engineLogLines, got)
	}
	if lines[1] != "  line 981" || !strings.HasPrefix(lines[len(lines)-1], "  FATAL ?[31mboom") {
		t.Errorf("tail lines: first %q, last %.30q; want line 981 and the FATAL line, escape replaced", lines[1], lines[len(lines)-1])
	}
	if n := len(lines[len(lines)-1]); n > engineLineBytes+8 {
		t.Errorf("a long line is quoted as %d bytes; want it cut at %d", n, engineLineBytes)
	}
	if strings.Contains(got, "panic.log") {
		t.Errorf("an empty log is quoted:\n%s", got)
	}
	if err := resetEngineLogs(logs); err != nil {
		t.Fatal(err)
	}
	if got := engineTail(dir, "runsc"); got != "" {
		t.Errorf("after a reset the tail is %q; want nothing", got)
	}
}
