//go:build !unix

package tartree

// noFollow is nothing where the flag does not exist: Pack looked at the file without
// following links just before, and the root still keeps it inside.
const noFollow = 0
