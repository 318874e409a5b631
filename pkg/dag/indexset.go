package dag

import "math/bits"

// indexSet is a set of tool indexes in [0, size), kept as a 64-ary tree of
// bitsets: levels[0] has one bit per index, and bit w of levels[k+1] is set
// exactly when word w of levels[k] is not zero. Adding, removing, finding
// the smallest member and the next member after an index each touch one
// word per level: ⌈log64 size⌉ words, three for 100,000 tools.
//
// It is the priority queue of Kahn's algorithm (the lowest plan index goes
// first) and the Tracker's ready set (listed in plan order), which makes
// both effectively linear instead of O(log n) per step with a heap.
type indexSet struct {
	levels [][]uint64
	n      int
}

func newIndexSet(size int) indexSet {
	var levels [][]uint64
	words := max(1, (size+63)/64)
	for {
		levels = append(levels, make([]uint64, words))
		if words == 1 {
			break
		}
		words = (words + 63) / 64
	}
	return indexSet{levels: levels}
}

// has reports whether i is a member.
func (s *indexSet) has(i int32) bool {
	return s.levels[0][i>>6]&(1<<(uint32(i)&63)) != 0
}

// add inserts i.
func (s *indexSet) add(i int32) {
	if s.has(i) {
		return
	}
	s.n++
	for _, level := range s.levels {
		w := i >> 6
		was := level[w]
		level[w] = was | 1<<(uint32(i)&63)
		if was != 0 {
			return // the levels above already mark this word
		}
		i = w
	}
}

// remove deletes i.
func (s *indexSet) remove(i int32) {
	if !s.has(i) {
		return
	}
	s.n--
	for _, level := range s.levels {
		w := i >> 6
		level[w] &^= 1 << (uint32(i) & 63)
		if level[w] != 0 {
			return // the word still has members: the levels above stay
		}
		i = w
	}
}

// min returns the smallest member, or -1 when the set is empty.
func (s *indexSet) min() int32 {
	k := len(s.levels) - 1
	if s.levels[k][0] == 0 {
		return -1
	}
	var i int32
	for ; k >= 0; k-- {
		i = i<<6 + int32(bits.TrailingZeros64(s.levels[k][i]))
	}
	return i
}

// next returns the smallest member not below i, or -1 when there is none.
func (s *indexSet) next(i int32) int32 {
	k := 0
	for {
		level := s.levels[k]
		w := i >> 6
		if int(w) >= len(level) {
			return -1
		}
		if rest := level[w] >> (uint32(i) & 63); rest != 0 {
			i += int32(bits.TrailingZeros64(rest))
			break
		}
		if k+1 == len(s.levels) {
			return -1
		}
		i = w + 1 // the next word, as a bit of the level above
		k++
	}
	for ; k > 0; k-- {
		i = i<<6 + int32(bits.TrailingZeros64(s.levels[k-1][i]))
	}
	return i
}
