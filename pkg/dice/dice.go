// Package dice parses and rolls dice formulas such as "1d20+2", "4d6kh3"
// or "2d20kl1 + 1d4 - 1": terms of NdM dice (N defaults to 1) or constants,
// joined by + or -, where a dice term may keep its highest (kh, h) or
// lowest (kl, l) K dice. Every count is bounded, so no formula can make a
// roll expensive.
package dice

import (
	"crypto/rand"
	"errors"
	"fmt"
	"math/big"
	mrand "math/rand/v2"
	"strconv"
	"strings"
)

// Bounds of a formula.
const (
	// MaxFormulaLen is the longest formula accepted, in bytes.
	MaxFormulaLen = 200
	// MaxTerms is the most terms in a formula.
	MaxTerms = 20
	// MaxDice is the most dice in one term.
	MaxDice = 100
	// MaxSides is the most sides of a die.
	MaxSides = 1000
	// MaxConstant is the largest constant term.
	MaxConstant = 100000
)

// ErrSyntax is wrapped by every parse error.
var ErrSyntax = errors.New("bad dice formula")

// Keep says which dice of a term count.
type Keep int

// Keep modes.
const (
	KeepAll Keep = iota
	KeepHighest
	KeepLowest
)

// Term is one part of a formula.
type Term struct {
	// Sign is +1 or -1.
	Sign int
	// Count and Sides describe dice (Sides 0 for a constant).
	Count, Sides int
	// Constant is the value of a constant term.
	Constant int
	// Keep and KeepN select the dice that count.
	Keep  Keep
	KeepN int
}

// Formula is a parsed formula.
type Formula struct {
	// Terms in order.
	Terms []Term
	// Text is the normalised formula.
	Text string
}

// Source yields random integers in [0, n).
type Source interface {
	IntN(n int) int
}

type cryptoSource struct{}

func (cryptoSource) IntN(n int) int {
	v, err := rand.Int(rand.Reader, big.NewInt(int64(n)))
	if err != nil {
		panic(fmt.Sprintf("dice: crypto/rand failed: %v", err))
	}
	return int(v.Int64())
}

// CryptoSource is the default source: crypto/rand.
var CryptoSource Source = cryptoSource{}

// Seeded returns a deterministic source (for tests and replays).
func Seeded(seed uint64) Source { return mrand.New(mrand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }

// Parse parses a formula, naming the problem and its position on error.
func Parse(s string) (*Formula, error) {
	if len(s) > MaxFormulaLen {
		return nil, fmt.Errorf("%w: longer than %d characters", ErrSyntax, MaxFormulaLen)
	}
	trimmed := strings.TrimSpace(s)
	for i := 1; i+1 < len(trimmed); i++ {
		if trimmed[i] == ' ' && isAlnum(trimmed[i-1]) && isAlnum(trimmed[i+1]) {
			return nil, fmt.Errorf("%w: space inside or between terms at position %d of %q (join terms with + or -)", ErrSyntax, i+1, s)
		}
	}
	src := strings.ToLower(strings.ReplaceAll(trimmed, " ", ""))
	if src == "" {
		return nil, fmt.Errorf("%w: empty formula", ErrSyntax)
	}
	f := &Formula{}
	pos := 0
	for pos < len(src) {
		sign := 1
		if len(f.Terms) > 0 || src[pos] == '+' || src[pos] == '-' {
			switch src[pos] {
			case '+':
			case '-':
				sign = -1
			default:
				return nil, fmt.Errorf("%w: expected + or - at position %d of %q", ErrSyntax, pos+1, s)
			}
			pos++
		}
		t, n, err := parseTerm(src[pos:])
		if err != nil {
			return nil, fmt.Errorf("%w at position %d of %q", err, pos+1, s)
		}
		t.Sign = sign
		f.Terms = append(f.Terms, t)
		if len(f.Terms) > MaxTerms {
			return nil, fmt.Errorf("%w: more than %d terms", ErrSyntax, MaxTerms)
		}
		pos += n
	}
	f.Text = f.String()
	return f, nil
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func number(s string) (int, int) {
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	if n == 0 || n > 6 {
		return -1, n
	}
	v, _ := strconv.Atoi(s[:n])
	return v, n
}

func parseTerm(s string) (Term, int, error) {
	count, n := number(s)
	pos := n
	if n > 6 {
		return Term{}, 0, fmt.Errorf("%w: number too large", ErrSyntax)
	}
	if pos >= len(s) || s[pos] != 'd' {
		if count < 0 {
			return Term{}, 0, fmt.Errorf("%w: expected a number or NdM", ErrSyntax)
		}
		if count > MaxConstant {
			return Term{}, 0, fmt.Errorf("%w: constant %d is over %d", ErrSyntax, count, MaxConstant)
		}
		return Term{Constant: count}, pos, nil
	}
	if count < 0 {
		count = 1
	}
	pos++ // 'd'
	sides, n := number(s[pos:])
	if sides < 0 {
		return Term{}, 0, fmt.Errorf("%w: expected the number of sides after d", ErrSyntax)
	}
	pos += n
	t := Term{Count: count, Sides: sides}
	switch {
	case count < 1 || count > MaxDice:
		return Term{}, 0, fmt.Errorf("%w: dice count must be 1..%d, got %d", ErrSyntax, MaxDice, count)
	case sides < 2 || sides > MaxSides:
		return Term{}, 0, fmt.Errorf("%w: sides must be 2..%d, got %d", ErrSyntax, MaxSides, sides)
	}
	rest := s[pos:]
	var mode Keep
	switch {
	case strings.HasPrefix(rest, "kh"):
		mode, pos = KeepHighest, pos+2
	case strings.HasPrefix(rest, "kl"):
		mode, pos = KeepLowest, pos+2
	case strings.HasPrefix(rest, "h"):
		mode, pos = KeepHighest, pos+1
	case strings.HasPrefix(rest, "l"):
		mode, pos = KeepLowest, pos+1
	case strings.HasPrefix(rest, "k"):
		mode, pos = KeepHighest, pos+1
	}
	if mode != KeepAll {
		k, n := number(s[pos:])
		if k < 0 {
			return Term{}, 0, fmt.Errorf("%w: expected how many dice to keep", ErrSyntax)
		}
		if k < 1 || k > count {
			return Term{}, 0, fmt.Errorf("%w: keep must be 1..%d, got %d", ErrSyntax, count, k)
		}
		pos += n
		t.Keep, t.KeepN = mode, k
	}
	return t, pos, nil
}

// String renders the normalised formula.
func (f *Formula) String() string {
	var b strings.Builder
	for i, t := range f.Terms {
		switch {
		case t.Sign < 0:
			b.WriteByte('-')
		case i > 0:
			b.WriteByte('+')
		}
		if t.Sides == 0 {
			b.WriteString(strconv.Itoa(t.Constant))
			continue
		}
		fmt.Fprintf(&b, "%dd%d", t.Count, t.Sides)
		switch t.Keep {
		case KeepHighest:
			fmt.Fprintf(&b, "kh%d", t.KeepN)
		case KeepLowest:
			fmt.Fprintf(&b, "kl%d", t.KeepN)
		}
	}
	return b.String()
}

// TermRoll is the dice rolled for one term.
type TermRoll struct {
	// Rolls are every die rolled, in order.
	Rolls []int `json:"rolls"`
	// Kept are the dice that counted.
	Kept []int `json:"kept"`
	// Value is the term's signed contribution.
	Value int `json:"value"`
}

// Roll is the result of rolling a formula.
type Roll struct {
	// Formula is the normalised formula.
	Formula string `json:"formula"`
	// Total is the sum.
	Total int `json:"total"`
	// Rolls are all dice rolled, in order (every term).
	Rolls []int `json:"rolls"`
	// Terms detail each term.
	Terms []TermRoll `json:"terms"`
}

// Roll rolls the formula with src (CryptoSource when nil).
func (f *Formula) Roll(src Source) Roll {
	if src == nil {
		src = CryptoSource
	}
	r := Roll{Formula: f.Text, Rolls: []int{}, Terms: make([]TermRoll, 0, len(f.Terms))}
	for _, t := range f.Terms {
		tr := TermRoll{Rolls: []int{}, Kept: []int{}}
		if t.Sides == 0 {
			tr.Value = t.Sign * t.Constant
		} else {
			for range t.Count {
				v := src.IntN(t.Sides) + 1
				tr.Rolls = append(tr.Rolls, v)
			}
			tr.Kept = keep(tr.Rolls, t.Keep, t.KeepN)
			sum := 0
			for _, v := range tr.Kept {
				sum += v
			}
			tr.Value = t.Sign * sum
			r.Rolls = append(r.Rolls, tr.Rolls...)
		}
		r.Total += tr.Value
		r.Terms = append(r.Terms, tr)
	}
	return r
}

func keep(rolls []int, mode Keep, n int) []int {
	out := append([]int(nil), rolls...)
	if mode == KeepAll {
		return out
	}
	// insertion sort: at most MaxDice values
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j] > out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	if mode == KeepHighest {
		return out[:n]
	}
	return out[len(out)-n:]
}

// Bounds returns the smallest and largest totals the formula can roll.
func (f *Formula) Bounds() (lo, hi int) {
	for _, t := range f.Terms {
		var tl, th int
		if t.Sides == 0 {
			tl, th = t.Constant, t.Constant
		} else {
			k := t.Count
			if t.Keep != KeepAll {
				k = t.KeepN
			}
			tl, th = k, k*t.Sides
		}
		if t.Sign < 0 {
			tl, th = -th, -tl
		}
		lo += tl
		hi += th
	}
	return lo, hi
}
