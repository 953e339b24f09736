package agent

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"

	"github.com/airlockhq/airlock/internal/agentproto"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/tartree"
	"golang.org/x/sys/unix"
)

// openTreeRoot opens the directory p (inside the root, resolved by the kernel) as an
// os.Root for tartree, making it and its parents first when mk.
func (s *server) openTreeRoot(p string, mk bool) (*os.Root, error) {
	rel, err := checkPath(p)
	if err != nil {
		return nil, err
	}
	if mk {
		if err := s.mkdirAll(rel, 0o755, -1, -1); err != nil {
			return nil, fsError(p, err)
		}
	}
	fd, err := s.openat(rel, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, fsError(p, err)
	}
	defer unix.Close(fd)
	// The descriptor's magic link names the directory the kernel resolved; the Root
	// keeps every later step under it.
	root, err := os.OpenRoot(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		return nil, fsError(p, errors.Unwrap(err))
	}
	return root, nil
}

// handleUntar unpacks the tar stream of the call's Data frames into req.Path.
func (s *server) handleUntar(c net.Conn, fw *frameWriter, req *agentproto.Request) error {
	root, err := s.openTreeRoot(req.Path, true)
	if err != nil {
		return err
	}
	defer root.Close()
	var lim tartree.Limits
	if req.Tar != nil {
		lim.MaxEntries, lim.MaxBytes = req.Tar.MaxEntries, req.Tar.MaxBytes
	}
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- copyFrames(c, pw) }()
	sum, err := tartree.Extract(root, bufio.NewReaderSize(pr, copyBuf), tartree.Options{Limits: lim, KeepSpecialBits: true})
	if err == nil {
		// The end of the archive is not the end of the stream: read it to its End.
		_, err = io.Copy(io.Discard, pr)
	}
	pr.CloseWithError(errors.New("unpacking stopped"))
	if ferr := <-done; err == nil && ferr != nil {
		err = ferr
	}
	if err != nil {
		var te *tartree.Error
		if errors.As(err, &te) {
			return errdefs.Invalid("%s: %s", req.Path, te.Error())
		}
		return fsError(req.Path, err)
	}
	return fw.json(agentproto.FrameResult, agentproto.TreeResult(sum))
}

// copyFrames writes the Data frames of c to pw until End, and closes pw.
func copyFrames(c net.Conn, pw *io.PipeWriter) error {
	for {
		t, b, err := agentproto.ReadFrame(c)
		if err != nil {
			pw.CloseWithError(err)
			return err
		}
		switch t {
		case agentproto.FrameData:
			if _, err := pw.Write(b); err != nil {
				return nil // the unpacking stopped; its error is the call's
			}
		case agentproto.FrameEnd:
			pw.Close()
			return nil
		case agentproto.FrameCancel:
			err := errdefs.Precondition("upload cancelled")
			pw.CloseWithError(err)
			return err
		default:
			err := errdefs.Invalid("unexpected frame %q during upload", byte(t))
			pw.CloseWithError(err)
			return err
		}
	}
}

// handleTar sends the tree under req.Path as a tar stream.
func (s *server) handleTar(fw *frameWriter, req *agentproto.Request) error {
	root, err := s.openTreeRoot(req.Path, false)
	if err != nil {
		return err
	}
	defer root.Close()
	out := &frameOut{fw: fw}
	bw := bufio.NewWriterSize(out, copyBuf)
	if _, err := tartree.Pack(root, bw, nil, nil); err != nil {
		return fsError(req.Path, err)
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return fw.json(agentproto.FrameResult, agentproto.SizeResult{Size: out.n})
}

// frameOut writes Data frames and counts their bytes.
type frameOut struct {
	fw *frameWriter
	n  int64
}

func (o *frameOut) Write(b []byte) (int, error) {
	n := len(b)
	for len(b) > 0 {
		k := min(len(b), agentproto.MaxPayload)
		if err := o.fw.frame(agentproto.FrameData, b[:k]); err != nil {
			return 0, err
		}
		o.n += int64(k)
		b = b[k:]
	}
	return n, nil
}
