package console

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"
)

// auditFetchMax bounds the messages one page of the audit trail fetches.
// The server skips the messages of other subjects (other tenants'), so a
// page costs what it finds, not what it passes over.
const auditFetchMax = 5000

// pageBySubject reads a page of st newest first: up to limit messages on
// subjects matching filter with sequences below before (0: from the
// newest). next is the before of the following page, 0 when nothing is
// left below.
//
// JetStream reads forward only (a direct get of the next message of a
// subject from a sequence), so the page is found in windows that go
// backwards from the top: each window's matches are read oldest first and
// taken newest first. A window that finds too few makes the next one four
// times wider (another tenant's flood is passed over quickly); one that
// holds more than 4*limit matches is narrowed by half before it is read
// whole, so a page fetches O(limit·log n) messages at worst, and at most
// auditFetchMax. The first window is limit sequences wide and cannot
// overflow, so every page moves on.
func pageBySubject(ctx context.Context, st jetstream.Stream, filter string, before uint64, limit int) ([]*jetstream.RawStreamMsg, uint64, error) {
	info, err := st.Info(ctx)
	if err != nil {
		return nil, 0, err
	}
	first, hi := info.State.FirstSeq, info.State.LastSeq
	if before != 0 {
		hi = min(hi, before-1)
	}
	if info.State.Msgs == 0 || hi < first || hi == 0 {
		return nil, 0, nil
	}
	capacity := 4 * limit
	width := uint64(limit)
	fetched := 0
	var out []*jetstream.RawStreamMsg
	for hi >= first && len(out) < limit {
		if fetched >= auditFetchMax {
			return out, hi + 1, nil // the next page goes on from here
		}
		lo := first
		if hi-first+1 > width {
			lo = hi - width + 1
		}
		got, n, overflow, err := matchesIn(ctx, st, filter, lo, hi, capacity)
		fetched += n
		if err != nil {
			return nil, 0, err
		}
		if overflow { // too dense: a narrower window
			width = max(1, (hi-lo+1)/2)
			continue
		}
		for i := len(got) - 1; i >= 0 && len(out) < limit; i-- {
			out = append(out, got[i])
		}
		if len(got) < limit/2+1 {
			width *= 4
		}
		hi = lo - 1
	}
	if len(out) == limit && out[limit-1].Sequence > first {
		return out, out[limit-1].Sequence, nil
	}
	return out, 0, nil
}

// matchesIn reads, oldest first, the messages on subjects matching filter
// with sequences from lo to hi, and says how many it fetched; past
// capacity matches it stops (overflow) and returns none.
func matchesIn(ctx context.Context, st jetstream.Stream, filter string, lo, hi uint64, capacity int) (got []*jetstream.RawStreamMsg, n int, overflow bool, err error) {
	for seq := lo; seq <= hi; {
		m, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
		n++
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return nil, n, false, err
		}
		if m.Sequence > hi {
			break
		}
		if len(got) == capacity {
			return nil, n, true, nil
		}
		got = append(got, m)
		seq = m.Sequence + 1
	}
	return got, n, false, nil
}
