package messages

import (
	"math"
	"time"
)

// RetryDelay is the wait before retry number retry (1-indexed) of a tool:
// backoffMs × 2^(retry−1) (§4.4). It saturates instead of overflowing and
// returns 0 for retry < 1 or backoffMs ≤ 0.
func RetryDelay(backoffMs int64, retry int) time.Duration {
	if retry < 1 || backoffMs <= 0 {
		return 0
	}
	const maxMs = int64(math.MaxInt64 / int64(time.Millisecond))
	ms := backoffMs
	for i := 1; i < retry; i++ {
		if ms > maxMs/2 {
			return time.Duration(maxMs) * time.Millisecond
		}
		ms *= 2
	}
	if ms > maxMs {
		ms = maxMs
	}
	return time.Duration(ms) * time.Millisecond
}

// DeepMerge merges patch into target per §6.3 and returns target (a new map
// when target is nil): objects merge recursively, arrays and primitives
// replace, and null deletes the key. patch values are copied, never aliased,
// so later changes to patch do not reach target.
func DeepMerge(target, patch map[string]any) map[string]any {
	if target == nil {
		target = make(map[string]any, len(patch))
	}
	for k, pv := range patch {
		if pv == nil {
			delete(target, k)
			continue
		}
		if pm, ok := pv.(map[string]any); ok {
			tm, ok := target[k].(map[string]any)
			if !ok {
				tm = nil
			}
			target[k] = DeepMerge(tm, pm)
			continue
		}
		target[k] = deepCopy(pv)
	}
	return target
}

func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = deepCopy(e)
		}
		return m
	case []any:
		s := make([]any, len(x))
		for i, e := range x {
			s[i] = deepCopy(e)
		}
		return s
	default:
		return v
	}
}
