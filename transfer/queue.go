package transfer

import (
	"context"
	"sync"

	"github.com/reclaimnet/reclaimnet/ckpt"
)

// workQueue is an unbounded FIFO of chunk hashes that NEED frames fill and
// sender workers drain.
type workQueue struct {
	mu     sync.Mutex
	items  []ckpt.Hash
	notify chan struct{} // closed and replaced when items arrive
}

func newWorkQueue(initial []ckpt.Hash) *workQueue {
	return &workQueue{items: append([]ckpt.Hash(nil), initial...), notify: make(chan struct{})}
}

func (q *workQueue) push(hs []ckpt.Hash) {
	if len(hs) == 0 {
		return
	}
	q.mu.Lock()
	q.items = append(q.items, hs...)
	close(q.notify)
	q.notify = make(chan struct{})
	q.mu.Unlock()
}

// pop blocks until an item is available or ctx is done.
func (q *workQueue) pop(ctx context.Context) (ckpt.Hash, bool) {
	for {
		q.mu.Lock()
		if len(q.items) > 0 {
			h := q.items[0]
			q.items = q.items[1:]
			q.mu.Unlock()
			return h, true
		}
		wait := q.notify
		q.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return ckpt.Hash{}, false
		}
	}
}
