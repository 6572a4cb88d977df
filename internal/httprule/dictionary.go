package httprule

import "strings"

// This file parses Structured Field Dictionaries (RFC 8941 3.2, with
// RFC 9651's Date and Display String items) as far as targeted fields
// need them: keys, and the kinds of their values, with booleans and
// integers read.

// sfKind is the type of a Structured Field's bare item.
type sfKind uint8

const (
	sfBoolean sfKind = iota
	sfInteger
	sfDecimal
	sfString
	sfToken
	sfBytes
	sfDate
	sfDisplay
	sfInnerList
)

// sfMember is a Dictionary member: its key, and the kind of its value
// with the value where this package reads it (booleans and integers).
type sfMember struct {
	key     string
	kind    sfKind
	boolean bool
	integer int64
}

// parseDictionary parses a Structured Field Dictionary (RFC 8941 4.2.2,
// with RFC 9651's Date and Display String items). A key that appears
// again replaces the earlier member in place. ok is false if v is not a
// Dictionary.
func parseDictionary(v string) (members []sfMember, ok bool) {
	p := sfParser{s: strings.TrimLeft(v, " ")}
	for !p.done() {
		key, ok := p.key()
		if !ok {
			return nil, false
		}
		m := sfMember{key: key, kind: sfBoolean, boolean: true}
		if p.peek() == '=' {
			p.i++
			if !p.member(&m) {
				return nil, false
			}
		} else if !p.parameters() {
			return nil, false
		}
		replaced := false
		for i := range members {
			if members[i].key == key {
				members[i], replaced = m, true
			}
		}
		if !replaced {
			members = append(members, m)
		}
		p.ows()
		if p.done() {
			break
		}
		if p.peek() != ',' {
			return nil, false
		}
		p.i++
		p.ows()
		if p.done() { // a trailing comma
			return nil, false
		}
	}
	return members, true
}

// sfParser reads s from i on.
type sfParser struct {
	s string
	i int
}

func (p *sfParser) done() bool { return p.i >= len(p.s) }

func (p *sfParser) peek() byte {
	if p.done() {
		return 0
	}
	return p.s[p.i]
}

// ows skips optional white space (SP and HTAB) between members.
func (p *sfParser) ows() {
	for !p.done() && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

// key reads a key: lcalpha or "*", then lcalpha, DIGIT, "_", "-", "."
// or "*".
func (p *sfParser) key() (string, bool) {
	start := p.i
	if c := p.peek(); !(c >= 'a' && c <= 'z' || c == '*') {
		return "", false
	}
	for !p.done() {
		c := p.s[p.i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' || c == '*') {
			break
		}
		p.i++
	}
	return p.s[start:p.i], true
}

// member reads a member's value after "=": an Inner List or an Item,
// then its parameters.
func (p *sfParser) member(m *sfMember) bool {
	if p.peek() == '(' {
		p.i++
		for {
			for p.peek() == ' ' {
				p.i++
			}
			if p.peek() == ')' {
				p.i++
				break
			}
			var item sfMember
			if !p.bareItem(&item) || !p.parameters() {
				return false
			}
			if c := p.peek(); c != ' ' && c != ')' {
				return false
			}
		}
		m.kind = sfInnerList
		return p.parameters()
	}
	return p.bareItem(m) && p.parameters()
}

// parameters reads ";key[=item]" parameters, which are ignored.
func (p *sfParser) parameters() bool {
	for p.peek() == ';' {
		p.i++
		for p.peek() == ' ' {
			p.i++
		}
		if _, ok := p.key(); !ok {
			return false
		}
		if p.peek() == '=' {
			p.i++
			var item sfMember
			if !p.bareItem(&item) {
				return false
			}
		}
	}
	return true
}

// bareItem reads one bare item into m.
func (p *sfParser) bareItem(m *sfMember) bool {
	switch c := p.peek(); {
	case c == '-' || c >= '0' && c <= '9':
		return p.number(m)
	case c == '"':
		m.kind = sfString
		return p.str()
	case c == '*' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
		m.kind = sfToken
		p.i++
		for !p.done() && (isTchar(p.s[p.i]) || p.s[p.i] == ':' || p.s[p.i] == '/') {
			p.i++
		}
		return true
	case c == ':':
		m.kind = sfBytes
		p.i++
		for !p.done() && p.s[p.i] != ':' {
			if c := p.s[p.i]; !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '=') {
				return false
			}
			p.i++
		}
		if p.done() {
			return false
		}
		p.i++
		return true
	case c == '?':
		p.i++
		m.kind = sfBoolean
		switch p.peek() {
		case '1':
			m.boolean = true
		case '0':
			m.boolean = false
		default:
			return false
		}
		p.i++
		return true
	case c == '@':
		p.i++
		if !p.number(m) || m.kind != sfInteger {
			return false
		}
		m.kind = sfDate
		return true
	case c == '%':
		p.i++
		m.kind = sfDisplay
		return p.peek() == '"' && p.str()
	}
	return false
}

// number reads an Integer (at most 15 digits) or a Decimal (at most 12
// digits, a dot, 1 to 3 digits).
func (p *sfParser) number(m *sfMember) bool {
	neg := p.peek() == '-'
	if neg {
		p.i++
	}
	var n int64
	digits, frac, dot := 0, 0, false
digits:
	for !p.done() {
		c := p.s[p.i]
		switch {
		case c >= '0' && c <= '9':
			if dot {
				frac++
			} else {
				digits++
				n = n*10 + int64(c-'0')
			}
		case c == '.' && !dot && digits > 0 && digits <= 12:
			dot = true
		default:
			break digits
		}
		p.i++
		if !dot && digits > 15 || dot && frac > 3 {
			return false
		}
	}
	if digits == 0 || dot && frac == 0 {
		return false
	}
	if dot {
		m.kind = sfDecimal
		return true
	}
	if neg {
		n = -n
	}
	m.kind, m.integer = sfInteger, n
	return true
}

// str reads a String: printable ASCII between quotes, with \" and \\.
func (p *sfParser) str() bool {
	p.i++ // the opening quote
	for !p.done() {
		c := p.s[p.i]
		p.i++
		switch {
		case c == '\\':
			if p.done() || p.s[p.i] != '"' && p.s[p.i] != '\\' {
				return false
			}
			p.i++
		case c == '"':
			return true
		case c < 0x20 || c > 0x7e:
			return false
		}
	}
	return false
}

// FieldName reports whether n is a valid header field name: a non-empty
// token (RFC 9110 5.1), such as a name of Policy.Targeted must be.
func FieldName(n string) bool {
	return n != "" && strings.IndexFunc(n, func(r rune) bool { return r > 0x7e || !isTchar(byte(r)) }) < 0
}

// isTchar reports whether c is a token character (RFC 9110 5.6.2).
func isTchar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
