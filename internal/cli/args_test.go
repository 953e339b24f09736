package cli

import (
	"context"
	"errors"
	"io"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{"1048576", 1048576, false},
		{"512M", 512 << 20, false},
		{"512m", 512 << 20, false},
		{"1G", 1 << 30, false},
		{"1.5GiB", 3 << 29, false},
		{"2Gi", 2 << 30, false},
		{"1 GiB", 1 << 30, false},
		{"100KB", 100 << 10, false},
		{"1MB", 1 << 20, false},
		{"4K", 4096, false},
		{"64b", 64, false},
		{"1T", 1 << 40, false},
		{"", 0, true},
		{"M", 0, true},
		{"12X", 0, true},
		{"-1G", 0, true},
		{"0", 0, true},
		{"1.5", 0, true},
		{"1e3", 0, true},
		{"1..5G", 0, true},
		{"99999999T", 0, true},
	}
	for _, tt := range tests {
		got, err := parseSize(tt.in)
		if tt.wantErr {
			if err == nil {
				t.Errorf("parseSize(%q) = %d, want an error", tt.in, got)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
	_, err := parseSize("12X")
	if !strings.Contains(err.Error(), "512M, 1G, 1.5GiB") {
		t.Errorf("error %q does not name the accepted forms", err)
	}
}

func TestFormatSize(t *testing.T) {
	tests := []struct {
		in   int64
		want string
	}{
		{0, "0B"}, {512, "512B"}, {1024, "1KiB"}, {512 << 20, "512MiB"}, {3 << 29, "1.5GiB"}, {1 << 40, "1TiB"},
	}
	for _, tt := range tests {
		if got := formatSize(tt.in); got != tt.want {
			t.Errorf("formatSize(%d) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestParseKV(t *testing.T) {
	tests := []struct {
		in, k, v string
		wantErr  bool
	}{
		{"A=1", "A", "1", false},
		{"A=", "A", "", false},
		{"A=b=c", "A", "b=c", false},
		{"A", "", "", true},
		{"=x", "", "", true},
	}
	for _, tt := range tests {
		k, v, err := parseKV(tt.in)
		if (err != nil) != tt.wantErr || k != tt.k || v != tt.v {
			t.Errorf("parseKV(%q) = %q, %q, %v; want %q, %q, error %v", tt.in, k, v, err, tt.k, tt.v, tt.wantErr)
		}
	}
}

func TestSplitRemote(t *testing.T) {
	tests := []struct {
		in, name, path string
		local, bad     bool
	}{
		{in: "box:/etc/hosts", name: "box", path: "/etc/hosts"},
		{in: "sb_123:/a:b", name: "sb_123", path: "/a:b"},
		{in: "file.txt", path: "file.txt", local: true},
		{in: "-", path: "-", local: true},
		{in: "./a:b", path: "./a:b", local: true},
		{in: "/tmp/x:y", path: "/tmp/x:y", local: true},
		{in: ":/x", path: ":/x", local: true},
		{in: "box:relative", bad: true},
		{in: "box:", bad: true},
	}
	for _, tt := range tests {
		name, path, err := splitRemote(tt.in)
		switch {
		case tt.bad:
			if err == nil || errors.Is(err, errLocalPath) {
				t.Errorf("splitRemote(%q) err = %v, want a refusal", tt.in, err)
			}
		case tt.local:
			if !errors.Is(err, errLocalPath) || path != tt.path {
				t.Errorf("splitRemote(%q) = %q, %v; want local %q", tt.in, path, err, tt.path)
			}
		default:
			if err != nil || name != tt.name || path != tt.path {
				t.Errorf("splitRemote(%q) = %q, %q, %v; want %q, %q", tt.in, name, path, err, tt.name, tt.path)
			}
		}
	}
}

func TestExitCode(t *testing.T) {
	tests := []struct {
		name       string
		res        api.ExecResult
		timeout    string
		want       int
		wantReason string
	}{
		{"succeeded", api.ExecResult{State: api.ExecSucceeded}, "", 0, ""},
		{"failed keeps code", api.ExecResult{State: api.ExecFailed, ExitCode: 42}, "", 42, ""},
		{"could not start", api.ExecResult{State: api.ExecFailed, ExitCode: 127, Error: "nope: not found"}, "", 127, "nope: not found"},
		{"failed without code", api.ExecResult{State: api.ExecFailed}, "", 1, "command failed"},
		{"timeout", api.ExecResult{State: api.ExecTimeout, ExitCode: -1}, "5s", 124, "command timed out after 5s"},
		{"timeout by lifetime", api.ExecResult{State: api.ExecTimeout, ExitCode: -1}, "", 124, "command timed out"},
		{"oom", api.ExecResult{State: api.ExecOOMKilled, ExitCode: -1}, "", 137, "command killed: out of memory (the sandbox's memory limit)"},
		{"sigkill", api.ExecResult{State: api.ExecKilled, ExitCode: 137, Signal: "SIGKILL"}, "", 137, "command killed by SIGKILL"},
		{"sigterm", api.ExecResult{State: api.ExecKilled, ExitCode: 143, Signal: "SIGTERM"}, "", 143, "command killed by SIGTERM"},
		{"killed without code", api.ExecResult{State: api.ExecKilled}, "", 137, "command killed by a signal"},
		{"cancelled", api.ExecResult{State: api.ExecCancelled, ExitCode: -1}, "", 130, "command cancelled"},
		{"unknown", api.ExecResult{State: "vanished"}, "", 1, `command ended in unknown state "vanished"`},
	}
	for _, tt := range tests {
		got, reason := exitCode(&tt.res, tt.timeout)
		if got != tt.want || reason != tt.wantReason {
			t.Errorf("%s: exitCode = %d, %q; want %d, %q", tt.name, got, reason, tt.want, tt.wantReason)
		}
	}
}

func TestSplitVerb(t *testing.T) {
	tests := []struct {
		in       []string
		verb     string
		wantRest []string
	}{
		{[]string{"ls"}, "ls", []string{}},
		{[]string{"--socket", "/s", "-o", "json", "get", "x"}, "get", []string{"--socket", "/s", "-o", "json", "x"}},
		{[]string{"--output=json", "ls"}, "ls", []string{"--output=json"}},
		{[]string{"--socket", "/s"}, "", []string{"--socket", "/s"}},
		{[]string{"-h"}, "-h", []string{}},
		{nil, "", nil},
	}
	for _, tt := range tests {
		verb, rest := splitVerb(tt.in)
		if verb != tt.verb || !reflect.DeepEqual(rest, tt.wantRest) {
			t.Errorf("splitVerb(%q) = %q, %q; want %q, %q", tt.in, verb, rest, tt.verb, tt.wantRest)
		}
	}
}

func TestParseInterleaved(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		npos    int
		withCmd bool
		pos     []string
		command []string
		cwd     string
		wantErr bool
	}{
		{"flags after the name", []string{"box", "--cwd", "/w", "--", "ls", "-l"}, 1, true, []string{"box"}, []string{"ls", "-l"}, "/w", false},
		{"flags before the name", []string{"--cwd=/w", "box", "--", "ls"}, 1, true, []string{"box"}, []string{"ls"}, "/w", false},
		{"command without --", []string{"box", "--cwd", "/w", "ls", "--cwd", "x"}, 1, true, []string{"box"}, []string{"ls", "--cwd", "x"}, "/w", false},
		{"command only", []string{"--", "echo", "hi"}, 0, true, nil, []string{"echo", "hi"}, "", false},
		{"fixed positionals", []string{"a", "--cwd", "/w", "b"}, 2, false, []string{"a", "b"}, nil, "/w", false},
		{"dash positional", []string{"-", "box:/x"}, 2, false, []string{"-", "box:/x"}, nil, "", false},
		{"too many", []string{"a", "b"}, 1, false, nil, nil, "", true},
		{"missing", []string{"--cwd", "/w"}, 1, true, nil, nil, "", true},
		{"unknown flag", []string{"box", "--nope"}, 1, false, nil, nil, "", true},
		{"bad output", []string{"box", "-o", "yaml"}, 1, false, nil, nil, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCmd(context.Background(), execVerb, nil, io.Discard, io.Discard)
			cwd := c.fs.String("cwd", "", "")
			pos, command, err := c.parse(tt.args, tt.npos, tt.withCmd)
			if tt.wantErr {
				var ue usageError
				if !errors.As(err, &ue) {
					t.Fatalf("parse err = %v, want a usage error", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if !reflect.DeepEqual(pos, tt.pos) || !reflect.DeepEqual(command, tt.command) || *cwd != tt.cwd {
				t.Errorf("parse = %q, %q, cwd %q; want %q, %q, cwd %q", pos, command, *cwd, tt.pos, tt.command, tt.cwd)
			}
		})
	}
}

func TestImageName(t *testing.T) {
	tests := []struct{ in, want string }{
		{"alpine.tar", "alpine"},
		{"/x/Alpine-3.20.tar.gz", "alpine-3.20"},
		{"debian.TGZ", "debian"},
		{"img.oci.tar.zst", "img"},
		{"plain", "plain"},
	}
	for _, tt := range tests {
		if got := imageName(tt.in); got != tt.want {
			t.Errorf("imageName(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestProgressBar(t *testing.T) {
	var b strings.Builder
	bar := &progressBar{w: &b}
	bar.update(api.ImportEvent{Phase: "upload", Done: 512, Total: 1024})
	bar.update(api.ImportEvent{Phase: "upload", Done: 512, Total: 1024})  // unchanged: no redraw
	bar.update(api.ImportEvent{Phase: "upload", Done: 1024, Total: 1024}) // sent: a status line until the daemon reports
	bar.update(api.ImportEvent{Phase: "unpack", Done: 2048})
	bar.finish()
	bar.finish() // once is enough
	want := "\rupload   [===============>              ]  50%  512B / 1KiB\x1b[K" +
		"\rupload   [==============================] 100%  1KiB / 1KiB\x1b[K\n" +
		"\runpack   unpacking…\x1b[K" +
		"\runpack   2KiB\x1b[K\n"
	if b.String() != want {
		t.Errorf("progress output =\n%q\nwant\n%q", b.String(), want)
	}

	// An upload of unknown size ends at its reader's end; a status line nothing replaced
	// is cleared, so what follows starts on a clean line.
	b.Reset()
	bar = &progressBar{w: &b}
	r := eofReader{r: strings.NewReader("data"), atEOF: bar.sent}
	bar.update(api.ImportEvent{Phase: "upload", Done: 4})
	io.ReadAll(r)
	bar.finish()
	want = "\rupload   4B\x1b[K\n\runpack   unpacking…\x1b[K\r\x1b[K"
	if b.String() != want {
		t.Errorf("progress output of an upload of unknown size =\n%q\nwant\n%q", b.String(), want)
	}
}

// TestSignalContext: a verb with something to undo (run) ends its context on SIGINT at
// once; ls, which has nothing to undo, catches it once it has run for lateSignalDelay,
// and ends its context as before, so that it reports the call cancelled. (Had either not
// caught the signal, it would have ended this test's process.)
func TestSignalContext(t *testing.T) {
	for _, tc := range []struct {
		args []string
		wait time.Duration
	}{
		{[]string{"--socket", "/nowhere", "run", "--", "true"}, 0},
		{[]string{"ls", "-o", "json"}, 3 * lateSignalDelay},
		{[]string{"-o", "json", "exec", "box", "--", "true"}, 3 * lateSignalDelay},
	} {
		ctx, stop := SignalContext(tc.args)
		if ctx.Err() != nil {
			t.Fatalf("%q: the context ended before any signal: %v", tc.args, ctx.Err())
		}
		time.Sleep(tc.wait)
		if err := syscall.Kill(syscall.Getpid(), syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
			if !errors.Is(ctx.Err(), context.Canceled) {
				t.Errorf("%q: the context ended with %v; want context.Canceled", tc.args, ctx.Err())
			}
		case <-time.After(5 * time.Second):
			t.Errorf("%q: SIGINT did not end the context", tc.args)
		}
		stop()
	}
	// A late verb's context released before its delay never catches a signal later.
	ctx, stop := SignalContext([]string{"get", "box"})
	stop()
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Errorf("a released context: %v; want context.Canceled", ctx.Err())
	}
}

// TestLateSignalVerbs: only verbs with nothing on this machine to undo wait before they
// catch signals.
func TestLateSignalVerbs(t *testing.T) {
	for v := range lateSignalVerbs {
		switch v.name {
		case "ls", "get", "exec", "status", "version":
		default:
			t.Errorf("verb %s catches signals late; it must leave nothing to undo when interrupted", v.name)
		}
	}
}
