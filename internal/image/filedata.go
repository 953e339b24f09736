package image

import (
	"bytes"
	"io"
	"os"
	"sync"
)

// holeBlock is the unit writeFileData checks for zeros: a block of zeros aligned to it
// becomes a hole instead of written bytes.
const holeBlock = 4096

var (
	zeroBlock [holeBlock]byte
	// copyBufs holds the buffers writeFileData reads through: large enough that a file
	// of a layer costs a few system calls, not one per 32 KiB.
	copyBufs = sync.Pool{New: func() any { b := make([]byte, 1<<20); return &b }}
)

// writeFileData copies r into the new, empty file f and returns how many bytes it
// holds. Aligned blocks of zeros are skipped rather than written, so a sparse file in a
// layer (and any file with long runs of zeros) stays sparse on disk, as the OCI image
// spec asks; the file's size is set at the end.
func writeFileData(f *os.File, r io.Reader) (int64, error) {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	var off int64
	holeAtEnd := false
	for {
		n, rerr := io.ReadFull(r, buf)
		if n > 0 {
			if err := writeSparse(f, buf[:n], off); err != nil {
				return off, err
			}
			off += int64(n)
			holeAtEnd = n >= holeBlock && bytes.Equal(buf[n-holeBlock:n], zeroBlock[:])
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return off, rerr
		}
	}
	if holeAtEnd {
		if err := f.Truncate(off); err != nil {
			return off, err
		}
	}
	return off, nil
}

// writeSparse writes b at off, leaving out the aligned blocks of zeros in it. Blocks
// that straddle a 4 KiB boundary of the file are written as they are.
func writeSparse(f *os.File, b []byte, off int64) error {
	start := 0 // the first byte of the run of data not yet written
	flush := func(end int) error {
		for start < end {
			n, err := f.WriteAt(b[start:end], off+int64(start))
			if err != nil {
				return err
			}
			start += n
		}
		return nil
	}
	i := 0
	if mis := int(off % holeBlock); mis != 0 {
		i = holeBlock - mis // the first block boundary in b
	}
	for ; i+holeBlock <= len(b); i += holeBlock {
		if !bytes.Equal(b[i:i+holeBlock], zeroBlock[:]) {
			continue
		}
		if err := flush(i); err != nil {
			return err
		}
		start = i + holeBlock
	}
	return flush(len(b))
}
