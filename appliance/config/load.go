package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// MaxFileSize bounds what LoadFile reads: a real sos.hcl is a few kilobytes,
// so anything near this is a mistake (a log or an image given by accident).
const MaxFileSize = 1 << 20

// Source is a config file as read from disk, kept so diagnostics can quote it
// and the daemon can compare content hashes.
type Source struct {
	Filename string
	Bytes    []byte
}

// Hash is the hex SHA-256 of the file content.
func (s Source) Hash() string {
	sum := sha256.Sum256(s.Bytes)
	return hex.EncodeToString(sum[:])
}

// ReadFile reads a config file with the checks an operator would want before
// any parsing: it exists, is a regular file, is readable, and is not huge.
func ReadFile(path string) (Source, hcl.Diagnostics) {
	fail := func(summary, detail string) (Source, hcl.Diagnostics) {
		return Source{Filename: path}, hcl.Diagnostics{{
			Severity: hcl.DiagError, Summary: summary, Detail: detail,
			Subject: &hcl.Range{Filename: path, Start: hcl.InitialPos, End: hcl.InitialPos},
		}}
	}
	f, err := os.Open(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fail("Config file not found", fmt.Sprintf("There is no file at %s; pass the right one with -c.", path))
	case errors.Is(err, fs.ErrPermission):
		return fail("Config file is not readable", fmt.Sprintf("Permission denied reading %s; run as root or fix its mode.", path))
	case err != nil:
		return fail("Cannot open config file", err.Error())
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fail("Cannot open config file", err.Error())
	}
	if st.IsDir() {
		return fail("Config path is a directory", fmt.Sprintf("%s is a directory; pass the sos.hcl file inside it.", path))
	}
	if !st.Mode().IsRegular() && st.Mode()&fs.ModeNamedPipe == 0 {
		return fail("Config path is not a regular file", fmt.Sprintf("%s is %s; pass the sos.hcl file.", path, fileKind(st.Mode())))
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		if errors.Is(err, fs.ErrPermission) {
			return fail("Config file is not readable", err.Error())
		}
		return fail("Cannot read config file", err.Error())
	}
	if len(data) > MaxFileSize {
		return fail("Config file is too large",
			fmt.Sprintf("%s is larger than %d MiB; a sos.hcl is a few kilobytes, so this is probably the wrong file.", path, MaxFileSize>>20))
	}
	return Source{Filename: path, Bytes: data}, nil
}

// fileKind names the kind of file a mode is, in words.
func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m&fs.ModeIrregular != 0:
		return "not a regular file"
	}
	return "not a regular file (" + m.Type().String() + ")"
}

// LoadFile reads, decodes and validates a config file.
func LoadFile(path string) (*Config, Source, hcl.Diagnostics) {
	src, diags := ReadFile(path)
	if diags.HasErrors() {
		return nil, src, diags
	}
	cfg, diags := Parse(src)
	return cfg, src, diags
}

// Parse decodes and validates config source. It returns a Config only when
// there are no errors.
func Parse(src Source) (*Config, hcl.Diagnostics) {
	start := &hcl.Range{Filename: src.Filename, Start: hcl.InitialPos, End: hcl.InitialPos}
	if len(bytes.TrimSpace(src.Bytes)) == 0 {
		return nil, hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Config file is empty",
			Detail: "Start from sos.hcl.example: it needs a security block and at least one site.", Subject: start}}
	}
	if bytes.IndexByte(src.Bytes, 0) >= 0 || !utf8.Valid(src.Bytes) {
		return nil, hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Config file is not text",
			Detail: "It holds NUL bytes or invalid UTF-8; this is not an HCL file.", Subject: start}}
	}
	if d := tooDeep(src); d != nil {
		return nil, hcl.Diagnostics{d}
	}
	file, diags := hclsyntax.ParseConfig(src.Bytes, src.Filename, hcl.InitialPos)
	if diags.HasErrors() {
		hintHexNumbers(diags, src.Bytes)
		return nil, diags
	}
	cfg := &Config{Filename: src.Filename}
	diags = append(diags, decodeRoot(file.Body, cfg)...)
	diags = append(diags, validate(cfg, file.Body)...)
	sortDiagnostics(diags)
	if diags.HasErrors() {
		return nil, diags
	}
	return cfg, diags
}

// The HCL parser recurses once per level of nesting, and a stack
// overflow is a fatal error no recover catches: a file of nothing but
// 100,000 '[' (400 KiB) ended the process, a running daemon on its reload
// too. tooDeep refuses, before parsing, what nests deeper than a config
// ever does: brackets, braces, parentheses and template interpolations
// deeper than maxNesting, more than maxConditionals '?' (each
// conditional's false branch nests the next), or a run of more than
// maxUnary unary operators. It reads the parser's own tokens (its lexer
// does not recurse), so a bracket inside a string or a comment, or a
// comment between two operators, counts as the parser sees it.
// Evaluating an expression recurses once per binary operator, index or
// attribute of a chain ("1+1+...+1" builds a left-deep tree): more than
// maxChain of them in one expression are refused too.
//
// The limits hold along every path through the nesting, not per level
// only: each level may hold its own run and chain, and the recursion is
// their sum over the levels open, so maxNesting x (maxUnary + maxChain)
// (65,536) stays far below what overflows (about 230,000 unary
// operators nested that way, helper-63's measure).
const (
	maxNesting      = 128
	maxConditionals = 4096
	maxUnary        = 256
	maxChain        = 256
)

func tooDeep(src Source) *hcl.Diagnostic {
	tokens, _ := hclsyntax.LexConfig(src.Bytes, src.Filename, hcl.InitialPos)
	depth, conditionals, unary := 0, 0, 0
	prev := hclsyntax.TokenNewline // the last token but comments and newlines
	// chains holds, per open bracket (the file's level first), the
	// opening token and the operators chained in the expression under
	// way at that level: a ',', '=' or ':' ends one, as a newline does
	// in a body.
	type level struct {
		open  hclsyntax.TokenType
		chain int
	}
	levels := []level{{open: hclsyntax.TokenOBrace}}
	for _, tok := range tokens {
		var why string
		top := &levels[len(levels)-1]
		// An operator or a postfix after an operand extends a chain.
		if operandEnd(prev) && chainsOn(tok.Type) {
			if top.chain++; top.chain > maxChain {
				why = fmt.Sprintf("more than %d operators, indexes or attributes chained in one expression", maxChain)
			}
		}
		switch tok.Type {
		case hclsyntax.TokenComma, hclsyntax.TokenEqual, hclsyntax.TokenColon:
			top.chain = 0
		case hclsyntax.TokenNewline:
			if top.open == hclsyntax.TokenOBrace {
				top.chain = 0
			}
		case hclsyntax.TokenOBrack, hclsyntax.TokenOBrace, hclsyntax.TokenOParen,
			hclsyntax.TokenTemplateInterp, hclsyntax.TokenTemplateControl:
			levels = append(levels, level{open: tok.Type})
		case hclsyntax.TokenCBrack, hclsyntax.TokenCBrace, hclsyntax.TokenCParen, hclsyntax.TokenTemplateSeqEnd:
			if len(levels) > 1 {
				levels = levels[:len(levels)-1]
			}
		}
		switch tok.Type {
		case hclsyntax.TokenOBrack, hclsyntax.TokenOBrace, hclsyntax.TokenOParen,
			hclsyntax.TokenTemplateInterp, hclsyntax.TokenTemplateControl:
			if depth++; depth > maxNesting {
				why = fmt.Sprintf("brackets, braces, parentheses or interpolations nest deeper than %d levels here", maxNesting)
			}
		case hclsyntax.TokenCBrack, hclsyntax.TokenCBrace, hclsyntax.TokenCParen, hclsyntax.TokenTemplateSeqEnd:
			depth = max(0, depth-1)
		case hclsyntax.TokenQuestion:
			if conditionals++; conditionals > maxConditionals {
				why = fmt.Sprintf("this is conditional number %d ('?'); a file holds at most %d", conditionals, maxConditionals)
			}
		}
		switch tok.Type {
		case hclsyntax.TokenMinus, hclsyntax.TokenBang:
			if unary++; unary > maxUnary {
				why = fmt.Sprintf("more than %d operators '!' or '-' in a row", maxUnary)
			}
		case hclsyntax.TokenComment, hclsyntax.TokenNewline:
		default:
			unary = 0
		}
		if why != "" {
			rng := tok.Range
			return &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Config file nests too deep",
				Detail: why + "; a sos.hcl nests a few levels. This is not a config sosappliance can read.", Subject: &rng}
		}
		if tok.Type != hclsyntax.TokenComment && tok.Type != hclsyntax.TokenNewline {
			prev = tok.Type
		}
	}
	return nil
}

// operandEnd says whether a token can end an operand, so that a '-'
// after it is binary and a '[' or '.' after it an index or an attribute.
func operandEnd(t hclsyntax.TokenType) bool {
	switch t {
	case hclsyntax.TokenNumberLit, hclsyntax.TokenIdent, hclsyntax.TokenCQuote, hclsyntax.TokenCHeredoc,
		hclsyntax.TokenCBrack, hclsyntax.TokenCParen, hclsyntax.TokenCBrace:
		return true
	}
	return false
}

// chainsOn says whether a token after an operand chains another on it.
func chainsOn(t hclsyntax.TokenType) bool {
	switch t {
	case hclsyntax.TokenPlus, hclsyntax.TokenMinus, hclsyntax.TokenStar, hclsyntax.TokenSlash, hclsyntax.TokenPercent,
		hclsyntax.TokenEqualOp, hclsyntax.TokenNotEqual, hclsyntax.TokenLessThan, hclsyntax.TokenLessThanEq,
		hclsyntax.TokenGreaterThan, hclsyntax.TokenGreaterThanEq, hclsyntax.TokenAnd, hclsyntax.TokenOr,
		hclsyntax.TokenOBrack, hclsyntax.TokenDot:
		return true
	}
	return false
}

// sortDiagnostics orders diagnostics by position so the report reads top to
// bottom like the file.
func sortDiagnostics(diags hcl.Diagnostics) {
	sort.SliceStable(diags, func(i, j int) bool {
		a, b := diags[i].Subject, diags[j].Subject
		if a == nil || b == nil {
			return a != nil && b == nil
		}
		if a.Start.Line != b.Start.Line {
			return a.Start.Line < b.Start.Line
		}
		return a.Start.Column < b.Start.Column
	})
}

// hintHexNumbers explains HCL's "Missing newline after argument" at the x
// of an unquoted hex number (steering_mark = 0x5350, as `ip rule` prints
// marks, or a datapath's port in hex): HCL has no hex numbers, and its
// own hint says nothing of that.
func hintHexNumbers(diags hcl.Diagnostics, src []byte) {
	for _, d := range diags {
		if d.Subject == nil || d.Summary != "Missing newline after argument" {
			continue
		}
		at := d.Subject.Start.Byte
		if at < 1 || at >= len(src) || src[at]|0x20 != 'x' || src[at-1] != '0' {
			continue
		}
		end := at + 1
		for end < len(src) && strings.IndexByte("0123456789abcdefABCDEF", src[end]) >= 0 {
			end++
		}
		lineStart := bytes.LastIndexByte(src[:at], '\n') + 1
		name, _, ok := strings.Cut(string(src[lineStart:at]), "=")
		if !ok || end == at+1 {
			continue
		}
		name, hex := strings.TrimSpace(name), string(src[at-1:end])
		d.Summary = fmt.Sprintf("%s: HCL has no hex numbers", name)
		// steering_mark takes hex in a string; a number elsewhere is
		// written in decimal.
		if n, err := strconv.ParseUint(hex, 0, 64); name != "steering_mark" && err == nil {
			d.Detail = fmt.Sprintf("Write it in decimal: %s = %d.", name, n)
		} else {
			d.Detail = fmt.Sprintf("Write it in quotes: %s = %q.", name, hex)
		}
	}
}

// ControlSocketIn reads daemon.control_socket from the file at path by
// its syntax alone, for `status` while the file does not validate: a
// daemon that refused a reload of it is when status is wanted most. It is
// "" when the file sets no literal string there that the parser reached.
func ControlSocketIn(path string) string {
	src, diags := ReadFile(path)
	if diags.HasErrors() || tooDeep(src) != nil {
		return ""
	}
	// A file that does not parse still has the blocks the parser read
	// before the error (an edit left a block unclosed below daemon).
	file, _ := hclsyntax.ParseConfig(src.Bytes, src.Filename, hcl.InitialPos)
	if file == nil {
		return ""
	}
	body, ok := file.Body.(*hclsyntax.Body)
	if !ok {
		return ""
	}
	for _, b := range body.Blocks {
		if b.Type != "daemon" || len(b.Labels) != 0 {
			continue
		}
		at, ok := b.Body.Attributes["control_socket"]
		if !ok {
			continue
		}
		v, d := at.Expr.Value(nil)
		if d.HasErrors() || v.IsNull() || !v.IsKnown() || v.Type() != cty.String {
			return ""
		}
		if s := v.AsString(); filepath.IsAbs(s) {
			return s
		}
	}
	return ""
}
