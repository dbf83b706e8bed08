package main

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// printable returns s as it is when every rune of it is printable
// (strconv.IsPrint: no control or format character, no invalid UTF-8),
// else s Go-quoted, so that text a caller chose (holder info, a revoke
// reason, an app's error body, a letter's fields) shows \x1b or \n instead
// of moving the cursor, recolouring the terminal or faking an output line.
func printable(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return r == utf8.RuneError || !strconv.IsPrint(r) }) < 0 {
		return s
	}
	return strconv.Quote(s)
}

// noEscapes returns s with every control or format character other than
// newline and tab written as a Go escape (\x1b, \u202e), for error text that
// may carry a server's or a caller's words: no terminal escape sequence
// gets through; the lines of a multi-line error stay lines.
func noEscapes(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n' || r == '\t' || strconv.IsPrint(r):
			b.WriteString(s[i : i+n])
		default:
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		}
		i += n
	}
	return b.String()
}
