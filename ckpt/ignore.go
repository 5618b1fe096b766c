package ckpt

import (
	"bytes"
	"errors"
	"fmt"
	"path"
	"strings"
)

// IgnoreFile is the name of the file, at the top of a bundle's directory,
// whose patterns (gitignore syntax) leave paths out of the bundle.
const IgnoreFile = ".reclaimnetignore"

// maxIgnoreFile bounds the ignore file read (patterns are kept in memory).
const maxIgnoreFile = 1 << 20

// Ignore is a parsed ignore file: gitignore patterns with git's meaning for
// a .gitignore at the top of a work tree.
//
// Rules (as git's): a blank line matches nothing; a line starting with #
// is a comment (\# for a literal #); trailing spaces are dropped unless
// escaped with a backslash; CR before LF is dropped; ! negates (\! for a
// literal !) and re-includes what an earlier pattern excluded, but never a
// path under an excluded directory; a trailing / matches directories only;
// a pattern with a / at its start or in its middle is anchored to the top
// and matched against the whole path, one without is matched against the
// last path element at any depth; * and ? never match a /, [...] is a
// class ([!...] and [^...] negate it, [:alpha:] and the other POSIX classes
// work inside it), a backslash escapes the next character; a leading **/
// matches in every directory, a trailing /** everything inside, /**/ zero
// or more directories. The last pattern that matches decides.
type Ignore struct {
	patterns []ignorePattern
}

type ignorePattern struct {
	glob     string // without the leading ! and the trailing /
	negate   bool
	dirOnly  bool
	basename bool // no slash: match the last path element at any depth
}

// ErrBadIgnoreFile is wrapped by errors in reading an ignore file.
var ErrBadIgnoreFile = errors.New("bad ignore file")

// ParseIgnore parses the contents of an ignore file.
func ParseIgnore(b []byte) (*Ignore, error) {
	if len(b) > maxIgnoreFile {
		return nil, fmt.Errorf("%w: %d bytes, max %d", ErrBadIgnoreFile, len(b), maxIgnoreFile)
	}
	if bytes.IndexByte(b, 0) >= 0 {
		return nil, fmt.Errorf("%w: NUL byte (not a text file)", ErrBadIgnoreFile)
	}
	b = bytes.TrimPrefix(b, []byte("\xef\xbb\xbf")) // a UTF-8 BOM, as git skips it
	ig := &Ignore{}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSuffix(line, "\r")
		if line == "" || line[0] == '#' {
			continue
		}
		line = trimTrailingSpaces(line)
		var p ignorePattern
		if strings.HasPrefix(line, "!") {
			p.negate = true
			line = line[1:]
		}
		if strings.HasSuffix(line, "/") {
			p.dirOnly = true
			line = line[:len(line)-1]
		}
		if line == "" {
			continue // "/", "!" and "!/" match nothing
		}
		p.basename = !strings.Contains(line, "/")
		// A leading slash only anchors the pattern; the path matched has none.
		p.glob = strings.TrimPrefix(line, "/")
		ig.patterns = append(ig.patterns, p)
	}
	return ig, nil
}

// trimTrailingSpaces drops trailing spaces that no backslash escapes.
func trimTrailingSpaces(s string) string {
	lastSpace := -1
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case ' ':
			if lastSpace < 0 {
				lastSpace = i
			}
		case '\\':
			i++
			if i == len(s) {
				return s
			}
			lastSpace = -1
		default:
			lastSpace = -1
		}
	}
	if lastSpace >= 0 {
		return s[:lastSpace]
	}
	return s
}

// Ignored reports whether the slash-separated path rel (relative to the
// top) is left out: it or one of its parent directories is excluded.
func (ig *Ignore) Ignored(rel string, isDir bool) bool {
	if ig == nil {
		return false
	}
	for i := 0; i < len(rel); i++ {
		if rel[i] == '/' && ig.excluded(rel[:i], true) {
			return true
		}
	}
	return ig.excluded(rel, isDir)
}

// excluded reports whether the last pattern matching rel itself excludes
// it (its parents are not looked at: a walk that skips excluded
// directories never asks about their contents).
func (ig *Ignore) excluded(rel string, isDir bool) bool {
	if ig == nil {
		return false
	}
	base := path.Base(rel)
	for i := len(ig.patterns) - 1; i >= 0; i-- {
		p := &ig.patterns[i]
		if p.dirOnly && !isDir {
			continue
		}
		var ok bool
		if p.basename {
			ok = wildmatch(p.glob, base, false) == wmMatch
		} else {
			ok = wildmatch(p.glob, rel, true) == wmMatch
		}
		if ok {
			return !p.negate
		}
	}
	return false
}

// wildmatch results (git's wildmatch.c): the aborts cut the backtracking
// short once no later position can match.
const (
	wmMatch = iota
	wmNoMatch
	wmAbortAll
	wmAbortToStarStar
)

// at returns s[i], or 0 past the end (the C code's terminating NUL).
func at(s string, i int) byte {
	if i < len(s) {
		return s[i]
	}
	return 0
}

func isGlobSpecial(c byte) bool { return c == '*' || c == '?' || c == '[' || c == '\\' }

// wildmatch matches text against the glob p as git's wildmatch does; with
// pathname set, * and ? do not match a slash and ** is special.
func wildmatch(p, text string, pathname bool) int {
	return dowild(p, 0, text, 0, pathname)
}

func dowild(p string, pi int, text string, ti int, pathname bool) int {
	for ; pi < len(p); pi, ti = pi+1, ti+1 {
		pch := p[pi]
		tch := at(text, ti)
		if tch == 0 && pch != '*' {
			return wmAbortAll
		}
		switch pch {
		case '\\':
			// Literal match with the next character (none: no match).
			pi++
			if at(p, pi) != tch {
				return wmNoMatch
			}
			continue
		default:
			if tch != pch {
				return wmNoMatch
			}
			continue
		case '?':
			if pathname && tch == '/' {
				return wmNoMatch
			}
			continue
		case '*':
			var matchSlash bool
			pi++
			if at(p, pi) == '*' {
				prev := pi - 2
				for pi++; at(p, pi) == '*'; pi++ {
				}
				if (prev < 0 || p[prev] == '/') &&
					(pi == len(p) || p[pi] == '/' || (p[pi] == '\\' && at(p, pi+1) == '/')) {
					// "**/" may match no directory at all: try the rest
					// of the pattern here first.
					if at(p, pi) == '/' && dowild(p, pi+1, text, ti, pathname) == wmMatch {
						return wmMatch
					}
					matchSlash = true
				} else {
					matchSlash = !pathname
				}
			} else {
				matchSlash = !pathname
			}
			if pi == len(p) {
				// A trailing ** matches everything, a trailing * only
				// what has no slash left.
				if !matchSlash && strings.IndexByte(text[ti:], '/') >= 0 {
					return wmNoMatch
				}
				return wmMatch
			} else if !matchSlash && p[pi] == '/' {
				// One * followed by a slash matches the rest of this
				// path element.
				slash := strings.IndexByte(text[ti:], '/')
				if slash < 0 {
					return wmNoMatch
				}
				ti += slash
				// The loop step consumes the slash in both.
				continue
			}
			for {
				if tch == 0 {
					break
				}
				// Skip ahead to the literal that follows the star.
				if !isGlobSpecial(p[pi]) {
					pch = p[pi]
					for {
						tch = at(text, ti)
						if tch == 0 || (!matchSlash && tch == '/') || tch == pch {
							break
						}
						ti++
					}
					if tch != pch {
						if matchSlash {
							return wmAbortAll
						}
						return wmAbortToStarStar
					}
				}
				if m := dowild(p, pi, text, ti, pathname); m != wmNoMatch {
					if !matchSlash || m != wmAbortToStarStar {
						return m
					}
				} else if !matchSlash && tch == '/' {
					return wmAbortToStarStar
				}
				ti++
				tch = at(text, ti)
			}
			return wmAbortAll
		case '[':
			pi++
			pch = at(p, pi)
			if pch == '^' {
				pch = '!'
			}
			negated := pch == '!'
			if negated {
				pi++
				pch = at(p, pi)
			}
			var prev byte
			matched := false
			for {
				if pch == 0 {
					return wmAbortAll
				}
				switch {
				case pch == '\\':
					pi++
					pch = at(p, pi)
					if pch == 0 {
						return wmAbortAll
					}
					if tch == pch {
						matched = true
					}
				case pch == '-' && prev != 0 && at(p, pi+1) != 0 && at(p, pi+1) != ']':
					pi++
					pch = p[pi]
					if pch == '\\' {
						pi++
						pch = at(p, pi)
						if pch == 0 {
							return wmAbortAll
						}
					}
					if tch <= pch && tch >= prev {
						matched = true
					}
					pch = 0 // so prev becomes 0: no range continues from here
				case pch == '[' && at(p, pi+1) == ':':
					s := pi + 2
					pi = s
					for pi < len(p) && p[pi] != ']' {
						pi++
					}
					if pi >= len(p) {
						return wmAbortAll
					}
					n := pi - s - 1
					if n < 0 || p[pi-1] != ':' {
						// No ":]": an ordinary '['.
						pi = s - 2
						pch = '['
						if tch == pch {
							matched = true
						}
						break
					}
					ok, known := posixClass(p[s:s+n], tch)
					if !known {
						return wmAbortAll
					}
					if ok {
						matched = true
					}
					pch = 0
				default:
					if tch == pch {
						matched = true
					}
				}
				prev = pch
				pi++
				pch = at(p, pi)
				if pch == ']' {
					break
				}
			}
			if matched == negated || (pathname && tch == '/') {
				return wmNoMatch
			}
			continue
		}
	}
	if ti < len(text) {
		return wmNoMatch
	}
	return wmMatch
}

// posixClass tests c against a [:name:] class; known is false for a name
// git does not know (the whole pattern then fails).
func posixClass(name string, c byte) (ok, known bool) {
	lower := c >= 'a' && c <= 'z'
	upper := c >= 'A' && c <= 'Z'
	digit := c >= '0' && c <= '9'
	switch name {
	case "alnum":
		return lower || upper || digit, true
	case "alpha":
		return lower || upper, true
	case "blank":
		return c == ' ' || c == '\t', true
	case "cntrl":
		return c < 0x20 || c == 0x7f, true
	case "digit":
		return digit, true
	case "graph":
		return c > 0x20 && c < 0x7f, true
	case "lower":
		return lower, true
	case "print":
		return c >= 0x20 && c < 0x7f, true
	case "punct":
		return c > 0x20 && c < 0x7f && !lower && !upper && !digit, true
	case "space":
		return c == ' ' || (c >= '\t' && c <= '\r'), true
	case "upper":
		return upper, true
	case "xdigit":
		return digit || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'), true
	}
	return false, false
}
