package kahuna

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/kahunago/kahuna/lease"
	"github.com/kahunago/kahuna/transport"
)

// A session renews its own lease and its plain locks in one request, a
// batch (lease/batch.go), and Close releases them in another: the server
// answers each name on its own, and sends each partition's share of the
// names to its leader as one call. Its election candidacies (owned by the
// ID and a value), semaphore permits, read/write locks, a lock with a
// proclaim or a release in flight, and a lock whose own Extend is running
// are renewed on their own, as every lock is when the Locker cannot take
// a batch (a plain Kahuna server, a Locker that is not a kahuna client or
// node).

// renewEach renews the locks each, every one with its own Extend; it
// returns the session's own lease's error.
func (s *Session) renewEach(ctx context.Context, locks []*Lock) error {
	var (
		wg  sync.WaitGroup
		err error
	)
	for _, lk := range locks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if e := lk.Extend(ctx, s.o.ttl); lk == s.lease {
				err = e
			}
		}()
	}
	wg.Wait()
	return err
}

// renewAll extends the session's lease and its locks' together: the
// session's KeepAlive. Its error is the lease's; a lock found gone is
// lost, and its own Context says so.
func (s *Session) renewAll(ctx context.Context) error {
	locks := append(s.held(), s.lease)
	if s.noBatch.Load() {
		return s.renewEach(ctx, locks)
	}
	var batched, alone []*Lock
	for _, lk := range locks {
		if s.batchable(lk) { // its extendMu is held from here
			batched = append(batched, lk)
		} else {
			alone = append(alone, lk)
		}
	}
	errs := make(chan error, 2)
	go func() { errs <- s.renewEach(ctx, alone) }()
	var leaseErr error
	for _, chunk := range chunks(batched) {
		if err := s.renewBatch(ctx, chunk); err != nil {
			leaseErr = err
		}
	}
	if err := <-errs; err != nil {
		leaseErr = err
	}
	return leaseErr
}

// batchable reports whether lk can be renewed in the session's batch,
// and if so holds its extendMu (released when its answer is taken in).
func (s *Session) batchable(lk *Lock) bool {
	if !s.inBatch(lk) || !lk.extendMu.TryLock() { // its own Extend runs: it renews itself
		return false
	}
	lk.mu.Lock()
	ok := lk.state == held && lk.releasing == 0
	lk.mu.Unlock()
	if !ok {
		lk.extendMu.Unlock()
	}
	return ok
}

// inBatch reports whether lk is a plain lock held by the session's own
// owner, as a batch of the session takes.
func (s *Session) inBatch(lk *Lock) bool {
	if lk.durability != s.o.durability || !lease.IsPlain(lk.resource) || len(lk.grants) > 0 {
		return false
	}
	owner, proclaimed := lk.owners()
	return proclaimed == nil && string(owner) == s.id
}

// releaseAll releases locks (ended already, the session's lease among
// them): the plain ones in batches, each name whose answer leaves the
// outcome open on its own, and the others on their own. It returns the
// releases whose outcome stayed unknown.
func (s *Session) releaseAll(ctx context.Context, locks []*Lock) error {
	var batched, alone []*Lock
	for _, lk := range locks {
		if !s.noBatch.Load() && s.inBatch(lk) {
			batched = append(batched, lk)
		} else {
			alone = append(alone, lk)
		}
	}
	for _, chunk := range chunks(batched) {
		each, _, err := s.sendBatch(ctx, lease.Unlock, chunk)
		for j, lk := range chunk {
			st := Errored
			if err == nil {
				st = each[j]
			}
			switch st {
			case Unlocked, LockDoesNotExist, InvalidOwner: // released, or gone already
			default: // the outcome open, or a refusal: asked alone, it is retried or says why
				alone = append(alone, lk)
			}
		}
	}
	errs := make([]error, len(alone))
	var wg sync.WaitGroup
	for i, lk := range alone {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = lk.release(ctx)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// chunks cuts locks into batches within the limits of one.
func chunks(locks []*Lock) [][]*Lock {
	var out [][]*Lock
	for len(locks) > 0 {
		n, size := 0, 0
		for n < len(locks) && n < lease.MaxGroupNames && size+len(locks[n].resource) <= lease.MaxGroupBytes {
			size += len(locks[n].resource)
			n++
		}
		out = append(out, locks[:n])
		locks = locks[n:]
	}
	return out
}

// renewBatch extends the locks of chunk, whose extendMus are held, in one
// batch, and takes in each one's answer as its own Extend would; a name
// whose answer leaves the outcome open is extended on its own. It returns
// the session's own lease's error, if the lease is in chunk.
func (s *Session) renewBatch(ctx context.Context, chunk []*Lock) error {
	errs := make([]error, len(chunk))
	each, sent, err := s.sendBatch(ctx, lease.Extend, chunk)
	var wg sync.WaitGroup
	for j, lk := range chunk {
		a := answer{sent: sent}
		switch {
		case err == nil:
			a.r = Result{Status: each[j]}
		case errors.Is(err, errBatchRefused): // nothing was sent, or nothing applied
			a.r = Result{Status: MustRetry}
		default: // the whole batch's outcome is unknown
			a.r, a.unknown, a.unknownSent = Result{Status: Errored}, true, sent
		}
		switch a.r.Status {
		case Errored, WaitingForReplication, MustRetry:
			// Asked again on its own, having noted what may have applied.
			if a.r.Status != MustRetry {
				lk.mu.Lock()
				lk.extendUnknown(sent, s.o.ttl)
				lk.mu.Unlock()
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer lk.extendMu.Unlock()
				_, errs[j] = lk.extendLocked(ctx, s.o.ttl)
			}()
		default:
			errs[j] = lk.extended(ctx, a, s.o.ttl)
			lk.extendMu.Unlock()
		}
	}
	wg.Wait()
	for j, lk := range chunk {
		if lk == s.lease {
			return errs[j]
		}
	}
	return nil
}

// errBatchRefused: a batch certainly not applied (refused whole, or
// never sent); its names are asked on their own.
var errBatchRefused = errors.New("kahuna: batch refused")

// sendBatch sends op for the locks in one batch by the session's owner
// and returns each lock's status. A Locker that cannot take a batch makes
// the session stop trying (noBatch) and the batch errBatchRefused.
func (s *Session) sendBatch(ctx context.Context, op lease.Op, locks []*Lock) ([]Status, time.Time, error) {
	req := lease.Request{Op: op, Resource: locks[0].resource, Owner: []byte(s.id), Durability: s.o.durability}
	if op == lease.Extend {
		req.TTL = s.o.ttl
	}
	for _, lk := range locks[1:] { // none for one name: the call itself
		req.Also = append(req.Also, lk.resource)
	}
	sent := s.lease.clock.Now()
	c, why := req.Check()
	if why != "" {
		return nil, sent, errBatchRefused
	}
	if op == lease.Extend {
		// A renewal ends with the session, as a lock's Extend ends with it.
		rctx, cancel := context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(s.lease.ctx, cancel)()
		ctx = rctx
	}
	_, r, err := lease.Do(ctx, s.lease.locker, c)
	switch {
	case errors.Is(err, lease.ErrNotApplied), errors.Is(err, transport.ErrNoNative):
		s.noBatch.Store(true)
		return nil, sent, errBatchRefused
	case err != nil:
		return nil, sent, err
	case len(locks) == 1:
		return []Status{r.Status}, sent, nil
	case len(r.Each) == len(locks):
		return r.Each, sent, nil
	case r.Status == InvalidInput: // a server that does not know batches
		s.noBatch.Store(true)
		return nil, sent, errBatchRefused
	case r.Status == MustRetry:
		return nil, sent, errBatchRefused
	}
	return nil, sent, errors.New("kahuna: a batch's answer has no status for each name")
}
