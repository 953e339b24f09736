package router

import (
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// This file follows where a command's input comes from and its output goes: redirections,
// here-documents and the stages of a pipeline.

// redirects judges a statement's redirections and notes where its command's input comes from.
func (s *riskScorer) redirects(u *shText, st *syntax.Stmt, inputs map[*syntax.CallExpr]shInput) {
	call, _ := st.Cmd.(*syntax.CallExpr)
	in := inputs[call]
	for _, r := range st.Redirs {
		switch r.Op {
		case syntax.Hdoc, syntax.DashHdoc:
			in.hdoc, in.herestr = r.Hdoc, false
		case syntax.WordHdoc:
			in.hdoc, in.herestr = r.Word, true
		case syntax.RdrIn, syntax.DplIn:
			if r.Op == syntax.DplIn && fdWord(r.Word) {
				continue
			}
			in.file = r.Word
			s.readTarget(wordArg(r.Word), "redirects input from", excerptWord(u, r.Word))
		case syntax.DplOut:
			if fdWord(r.Word) {
				continue
			}
			s.writeTarget(wordArg(r.Word), "redirects output to", excerptWord(u, r.Word))
		default: // >, >>, >|, <>, &>, &>>, and the zsh clobbering forms
			s.writeTarget(wordArg(r.Word), "redirects output to", excerptWord(u, r.Word))
		}
	}
	if call != nil {
		inputs[call] = in
	}
}

// fdWord reports whether a >& or <& word names a file descriptor (2, -, 3-) rather than a file.
func fdWord(w *syntax.Word) bool {
	a := wordArg(w)
	if !a.static {
		return false
	}
	v := strings.TrimSuffix(a.lit, "-")
	for _, c := range v {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// pipeline notes, for each stage of a pipeline but the first, that its input is piped
// and whether an earlier stage downloads. It flattens a | b | c once, so that each
// stage is looked at once however long the pipeline.
func (s *riskScorer) pipeline(u *shText, b *syntax.BinaryCmd, inputs map[*syntax.CallExpr]shInput, done map[*syntax.BinaryCmd]bool) {
	var stages []*syntax.Stmt
	var flatten func(st *syntax.Stmt)
	flatten = func(st *syntax.Stmt) {
		if x, ok := st.Cmd.(*syntax.BinaryCmd); ok && (x.Op == syntax.Pipe || x.Op == syntax.PipeAll) && len(st.Redirs) == 0 {
			done[x] = true
			flatten(x.X)
			flatten(x.Y)
			return
		}
		stages = append(stages, st)
	}
	done[b] = true
	flatten(b.X)
	flatten(b.Y)
	download := false
	for i := 1; i < len(stages); i++ {
		download = download || s.downloads(u, stages[i-1])
		mark := func(c *syntax.CallExpr) {
			in := inputs[c]
			in.piped = true
			in.download = in.download || download
			inputs[c] = in
		}
		if c, ok := stages[i].Cmd.(*syntax.CallExpr); ok {
			mark(c)
			continue
		}
		s.inspect(stages[i], func(n syntax.Node) bool {
			if c, ok := n.(*syntax.CallExpr); ok {
				mark(c)
			}
			return true
		})
	}
}

// downloads reports whether node runs a command that fetches something from the network
// and prints it.
func (s *riskScorer) downloads(u *shText, node syntax.Node) bool {
	found := false
	s.inspect(node, func(n syntax.Node) bool {
		if c, ok := n.(*syntax.CallExpr); ok && !found && len(c.Args) > 0 {
			argv := argvOf(c.Args)
			for hops := 0; hops < maxWrapHops && len(argv) > 0 && argv[0].static; hops++ {
				name := commandName(argv[0].lit)
				if downloaders[name] {
					found = true
					break
				}
				uw, ok := unwrap(name, argv)
				if !ok {
					break
				}
				argv = uw.inner
			}
		}
		return !found
	})
	return found
}

// downloaders print what they fetch, so piping them into an interpreter runs it.
var downloaders = map[string]bool{
	"curl": true, "wget": true, "fetch": true, "aria2c": true, "http": true, "https": true, "xh": true,
	"nc": true, "ncat": true, "netcat": true, "socat": true, "lwp-request": true, "GET": true,
}
