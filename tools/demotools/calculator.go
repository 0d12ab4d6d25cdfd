package demotools

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// maxExpression bounds the calculator's input, in bytes, and maxDepth its
// nesting of parentheses and unary signs.
const (
	maxExpression = 1000
	maxDepth      = 100
)

// Evaluate computes an arithmetic expression: decimal numbers, + - * / %
// (remainder) and ^ (power, right-associative), unary signs and
// parentheses, with the usual precedence. × and ÷ are read as * and /. It
// fails on anything else, on division by zero and on a result that is not
// a finite number.
func Evaluate(expr string) (float64, error) {
	if len(expr) > maxExpression {
		return 0, fmt.Errorf("the expression is longer than %d bytes", maxExpression)
	}
	expr = strings.NewReplacer("×", "*", "÷", "/").Replace(expr)
	p := &parser{src: expr}
	p.skip()
	if p.pos == len(p.src) {
		return 0, errors.New("the expression is empty")
	}
	v, err := p.sum(0)
	if err != nil {
		return 0, err
	}
	p.skip()
	if p.pos < len(p.src) {
		return 0, fmt.Errorf("unexpected %q at position %d", p.src[p.pos], p.pos+1)
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, errors.New("the result is not a finite number")
	}
	return v, nil
}

// parser is a recursive-descent parser over the grammar
//
//	sum     = product { ("+" | "-") product }
//	product = unary { ("*" | "/" | "%") unary }
//	unary   = ("+" | "-") unary | power
//	power   = primary [ "^" unary ]
//	primary = number | "(" sum ")"
//
// so -2^2 is -(2^2) and 2^-1 is 0.5, as in mathematics.
type parser struct {
	src string
	pos int
}

func (p *parser) skip() {
	for p.pos < len(p.src) && (p.src[p.pos] == ' ' || p.src[p.pos] == '\t') {
		p.pos++
	}
}

// peek returns the next non-blank byte, 0 at the end.
func (p *parser) peek() byte {
	p.skip()
	if p.pos < len(p.src) {
		return p.src[p.pos]
	}
	return 0
}

func (p *parser) sum(depth int) (float64, error) {
	v, err := p.product(depth)
	if err != nil {
		return 0, err
	}
	for {
		switch p.peek() {
		case '+', '-':
			op := p.src[p.pos]
			p.pos++
			w, err := p.product(depth)
			if err != nil {
				return 0, err
			}
			if op == '+' {
				v += w
			} else {
				v -= w
			}
		default:
			return v, nil
		}
	}
}

func (p *parser) product(depth int) (float64, error) {
	v, err := p.unary(depth)
	if err != nil {
		return 0, err
	}
	for {
		switch p.peek() {
		case '*', '/', '%':
			op := p.src[p.pos]
			p.pos++
			w, err := p.unary(depth)
			if err != nil {
				return 0, err
			}
			switch {
			case op == '*':
				v *= w
			case w == 0:
				return 0, errors.New("division by zero")
			case op == '/':
				v /= w
			default:
				v = math.Mod(v, w)
			}
		default:
			return v, nil
		}
	}
}

func (p *parser) power(depth int) (float64, error) {
	base, err := p.primary(depth)
	if err != nil {
		return 0, err
	}
	if p.peek() != '^' {
		return base, nil
	}
	p.pos++
	if depth+1 > maxDepth {
		return 0, fmt.Errorf("the expression nests deeper than %d levels", maxDepth)
	}
	exp, err := p.unary(depth + 1)
	if err != nil {
		return 0, err
	}
	return math.Pow(base, exp), nil
}

func (p *parser) unary(depth int) (float64, error) {
	if depth > maxDepth {
		return 0, fmt.Errorf("the expression nests deeper than %d levels", maxDepth)
	}
	switch p.peek() {
	case '+':
		p.pos++
		return p.unary(depth + 1)
	case '-':
		p.pos++
		v, err := p.unary(depth + 1)
		return -v, err
	}
	return p.power(depth)
}

func (p *parser) primary(depth int) (float64, error) {
	c := p.peek()
	switch {
	case c == '(':
		p.pos++
		v, err := p.sum(depth + 1)
		if err != nil {
			return 0, err
		}
		if p.peek() != ')' {
			return 0, fmt.Errorf("missing ) at position %d", p.pos+1)
		}
		p.pos++
		return v, nil
	case c >= '0' && c <= '9' || c == '.':
		start := p.pos
		for p.pos < len(p.src) && (p.src[p.pos] >= '0' && p.src[p.pos] <= '9' || p.src[p.pos] == '.') {
			p.pos++
		}
		v, err := strconv.ParseFloat(p.src[start:p.pos], 64)
		if err != nil {
			return 0, fmt.Errorf("%q is not a number", p.src[start:p.pos])
		}
		return v, nil
	case c == 0:
		return 0, errors.New("the expression ends too early")
	}
	return 0, fmt.Errorf("unexpected %q at position %d", c, p.pos+1)
}
