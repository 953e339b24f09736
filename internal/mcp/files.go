package mcp

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/api"
)

// ReadFileInput is the input of read_file.
type ReadFileInput struct {
	Sandbox string `json:"sandbox" jsonschema:"name or id of the sandbox"`
	Path    string `json:"path" jsonschema:"absolute path of the file in the sandbox"`
	Offset  int64  `json:"offset,omitempty" jsonschema:"byte offset to start reading at (default 0)"`
	Limit   int    `json:"limit,omitempty" jsonschema:"most bytes to return; more than the server's read cap is reduced to it"`
}

// ReadFileOutput is one window of a file.
type ReadFileOutput struct {
	Path       string `json:"path"`
	Size       int64  `json:"size" jsonschema:"the file's size in bytes"`
	Offset     int64  `json:"offset" jsonschema:"where the returned bytes start"`
	Length     int    `json:"length" jsonschema:"how many bytes were returned"`
	EOF        bool   `json:"eof" jsonschema:"the returned bytes reach the end of the file"`
	NextOffset int64  `json:"next_offset,omitempty" jsonschema:"when not at the end: the offset to read the rest from"`
	Encoding   string `json:"encoding" jsonschema:"text (UTF-8) or base64 (the bytes are not UTF-8 text)"`
	Content    string `json:"content"`
}

// WriteFileInput is the input of write_file.
type WriteFileInput struct {
	Sandbox  string `json:"sandbox" jsonschema:"name or id of the sandbox"`
	Path     string `json:"path" jsonschema:"absolute path of the file in the sandbox; missing parent directories are made"`
	Content  string `json:"content" jsonschema:"the whole new content of the file"`
	Encoding string `json:"encoding,omitempty" jsonschema:"text (the default) or base64, for binary content"`
	Mode     string `json:"mode,omitempty" jsonschema:"permission bits in octal, such as 0755 for a script (default 0644)"`
}

// WriteFileOutput describes the file written.
type WriteFileOutput struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
	Mode string `json:"mode"`
}

// ListFilesInput is the input of list_files.
type ListFilesInput struct {
	Sandbox string `json:"sandbox" jsonschema:"name or id of the sandbox"`
	Path    string `json:"path,omitempty" jsonschema:"absolute path of the directory (default /)"`
}

// ListFilesOutput is a directory's entries, capped.
type ListFilesOutput struct {
	Path      string      `json:"path"`
	Entries   []FileEntry `json:"entries"`
	Total     int         `json:"total" jsonschema:"how many entries the directory has"`
	Truncated bool        `json:"truncated,omitempty" jsonschema:"only the first entries are listed"`
}

// FileEntry is one directory entry.
type FileEntry struct {
	Name  string    `json:"name"`
	Size  int64     `json:"size"`
	Mode  string    `json:"mode" jsonschema:"permission bits in octal"`
	IsDir bool      `json:"is_dir"`
	MTime time.Time `json:"mtime"`
}

// maxEntries caps a list_files answer.
const maxEntries = 1000

func (t *tools) addFileTools(r *registry) {
	add(r, &mcpsdk.Tool{
		Name:  "read_file",
		Title: "Read a file",
		Description: fmt.Sprintf("Read a file in a sandbox: at most %d bytes per call, from offset. ", t.opts.ReadLimit) +
			"The answer gives the file's size and, when there is more, the next offset to read from. " +
			"Text comes back as it is; other bytes come back base64-encoded.",
		Annotations: &mcpsdk.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: boolPtr(false)},
	}, func(s *jsonschema.Schema) {
		setMinimum(s, "offset", 0)
		setMinimum(s, "limit", 1)
		setDefault(s, "limit", t.opts.ReadLimit)
	}, t.readFile)
	add(r, &mcpsdk.Tool{
		Name:        "write_file",
		Title:       "Write a file",
		Description: "Write a whole file in a sandbox, replacing any file at that path and making missing parent directories.",
		Annotations: &mcpsdk.ToolAnnotations{DestructiveHint: boolPtr(true), IdempotentHint: true, OpenWorldHint: boolPtr(false)},
	}, func(s *jsonschema.Schema) {
		setEnum(s, "encoding", "text", "base64")
		setPattern(s, "mode", "^0?[0-7]{3}$")
	}, t.writeFile)
	add(r, &mcpsdk.Tool{
		Name:        "list_files",
		Title:       "List a directory",
		Description: fmt.Sprintf("List a directory in a sandbox: name, size, mode, type and modification time of each entry (at most %d).", maxEntries),
		Annotations: &mcpsdk.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: boolPtr(false)},
	}, nil, t.listFiles)
}

func (t *tools) readFile(ctx context.Context, _ *mcpsdk.CallToolRequest, in ReadFileInput) (*mcpsdk.CallToolResult, ReadFileOutput, error) {
	if err := needSandbox(in.Sandbox); err != nil {
		return nil, ReadFileOutput{}, err
	}
	if err := checkPath(in.Path); err != nil {
		return nil, ReadFileOutput{}, err
	}
	if in.Offset < 0 {
		return nil, ReadFileOutput{}, invalidf("offset must not be negative, not %d", in.Offset)
	}
	limit := in.Limit
	switch {
	case limit < 0:
		return nil, ReadFileOutput{}, invalidf("limit must be positive, not %d", limit)
	case limit == 0 || limit > t.opts.ReadLimit:
		limit = t.opts.ReadLimit
	}
	fi, err := t.cl.Stat(ctx, in.Sandbox, in.Path)
	if err != nil {
		return nil, ReadFileOutput{}, err
	}
	if fi.IsDir {
		return nil, ReadFileOutput{}, invalidf("%s is a directory: list it with list_files", in.Path)
	}
	out := ReadFileOutput{Path: in.Path, Size: fi.Size, Offset: in.Offset, Encoding: "text"}
	var data []byte
	eof := true
	if in.Offset < fi.Size {
		// Only the part is read: a file is paged through without reading it again from
		// its start for each page.
		var buf bytes.Buffer
		_, _, err := t.cl.DownloadRange(ctx, in.Sandbox, in.Path, in.Offset, int64(limit), &buf)
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) { // a file that shrank is read as far as it goes
			return nil, ReadFileOutput{}, err
		}
		data = buf.Bytes()
		eof = len(data) < limit || in.Offset+int64(len(data)) >= fi.Size
	}
	if !eof {
		data = trimPartialRuneEnd(data) // the next read starts at the cut sequence
	}
	if utf8.Valid(data) {
		out.Content = string(data)
	} else {
		out.Encoding, out.Content = "base64", base64.StdEncoding.EncodeToString(data)
	}
	out.Length, out.EOF = len(data), eof
	if !eof {
		out.NextOffset = in.Offset + int64(len(data))
	}
	var note string
	switch {
	case !eof:
		note = fmt.Sprintf("[airlock: %s: bytes %d to %d of %d (%s). More remains: call read_file with offset=%d.]",
			in.Path, out.Offset, out.NextOffset, out.Size, out.Encoding, out.NextOffset)
	case out.Offset > 0 || out.Encoding != "text":
		note = fmt.Sprintf("[airlock: %s: bytes %d to %d of %d (%s), to the end of the file.]",
			in.Path, out.Offset, out.Offset+int64(out.Length), out.Size, out.Encoding)
	}
	content := []mcpsdk.Content{&mcpsdk.TextContent{Text: out.Content}}
	if note != "" {
		content = append(content, &mcpsdk.TextContent{Text: note})
	}
	return &mcpsdk.CallToolResult{Content: content}, out, nil
}

func (t *tools) writeFile(ctx context.Context, _ *mcpsdk.CallToolRequest, in WriteFileInput) (*mcpsdk.CallToolResult, WriteFileOutput, error) {
	if err := needSandbox(in.Sandbox); err != nil {
		return nil, WriteFileOutput{}, err
	}
	if err := checkPath(in.Path); err != nil {
		return nil, WriteFileOutput{}, err
	}
	data := []byte(in.Content)
	switch in.Encoding {
	case "", "text":
	case "base64":
		var err error
		if data, err = base64.StdEncoding.DecodeString(in.Content); err != nil {
			return nil, WriteFileOutput{}, invalidf("content is not valid base64: %v", err)
		}
	default:
		return nil, WriteFileOutput{}, invalidf("encoding %q: want text or base64", in.Encoding)
	}
	mode := os.FileMode(0o644)
	if in.Mode != "" {
		m, err := strconv.ParseUint(in.Mode, 8, 32)
		if err != nil || m > 0o777 {
			return nil, WriteFileOutput{}, invalidf("mode %q: want permission bits in octal, such as 0644 or 0755", in.Mode)
		}
		mode = os.FileMode(m)
	}
	fi, err := t.cl.Upload(ctx, in.Sandbox, in.Path, mode, bytes.NewReader(data))
	if err != nil {
		return nil, WriteFileOutput{}, err
	}
	out := WriteFileOutput{Path: in.Path, Size: fi.Size, Mode: fmt.Sprintf("%04o", fi.Mode&0o7777)}
	if fi.Mode == 0 { // an older daemon that does not say
		out.Mode = fmt.Sprintf("%04o", mode)
	}
	text := fmt.Sprintf("wrote %d bytes to %s in sandbox %s (mode %s)", out.Size, out.Path, in.Sandbox, out.Mode)
	return textResult(text), out, nil
}

func (t *tools) listFiles(ctx context.Context, _ *mcpsdk.CallToolRequest, in ListFilesInput) (*mcpsdk.CallToolResult, ListFilesOutput, error) {
	if err := needSandbox(in.Sandbox); err != nil {
		return nil, ListFilesOutput{}, err
	}
	if in.Path == "" {
		in.Path = "/"
	}
	if err := checkPath(in.Path); err != nil {
		return nil, ListFilesOutput{}, err
	}
	files, err := t.cl.ListFiles(ctx, in.Sandbox, in.Path)
	if err != nil {
		return nil, ListFilesOutput{}, err
	}
	out := ListFilesOutput{Path: in.Path, Total: len(files), Entries: []FileEntry{}}
	if len(files) > maxEntries {
		files, out.Truncated = files[:maxEntries], true
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s in sandbox %s: %d entries\n", in.Path, in.Sandbox, out.Total)
	for _, f := range files {
		e := fileEntry(f)
		out.Entries = append(out.Entries, e)
		kind, name := "-", e.Name
		if e.IsDir {
			kind, name = "d", name+"/"
		}
		fmt.Fprintf(&b, "%s %s %10d %s %s\n", kind, e.Mode, e.Size, e.MTime.UTC().Format(time.RFC3339), name)
	}
	if out.Truncated {
		fmt.Fprintf(&b, "[airlock: listing truncated: showing %d of %d entries; list a narrower directory or use exec (ls, find).]\n", maxEntries, out.Total)
	}
	return textResult(b.String()), out, nil
}

func fileEntry(f api.FileInfo) FileEntry {
	return FileEntry{Name: f.Name, Size: f.Size, Mode: fmt.Sprintf("%04o", f.Mode&0o7777), IsDir: f.IsDir, MTime: f.MTime}
}

// checkPath refuses a path the daemon would refuse, with a message that says why.
func checkPath(p string) error {
	if p == "" {
		return invalidf("path is empty")
	}
	if !path.IsAbs(p) || path.Clean(p) != p {
		return invalidf("path %q must be absolute and clean (no \"..\", \".\" or trailing \"/\"), such as /root/main.py", p)
	}
	return nil
}

// needSandbox refuses an empty sandbox argument.
func needSandbox(ref string) error {
	if strings.TrimSpace(ref) == "" {
		return invalidf("sandbox is empty: give a sandbox's name or id (list_sandboxes lists them)")
	}
	return nil
}
