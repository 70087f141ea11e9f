package cluster

import "testing"

// view3 is a balancing view of node self in a 3-member cluster where every
// member votes in every partition and all are live unless listed in down.
func view3(self uint64, leaders []uint64, down ...uint64) balanceView {
	v := balanceView{self: self, leaders: leaders, live: map[uint64]bool{1: true, 2: true, 3: true}}
	for _, id := range down {
		v.live[id] = false
	}
	for p := range leaders {
		v.voters = append(v.voters, []uint64{1, 2, 3})
		v.movable = append(v.movable, leaders[p] == self)
	}
	return v
}

// The balancing rule, row by row.
func TestBalanceMove(t *testing.T) {
	busy := view3(1, []uint64{1, 1, 1})
	busy.movable[1], busy.movable[2] = false, false // moved or elected within the cooldown
	notVoter := view3(1, []uint64{1, 1, 1})
	for p := range notVoter.voters {
		notVoter.voters[p] = []uint64{1, 3} // node 2 not (yet) a voter
	}
	for _, c := range []struct {
		name string
		v    balanceView
		skip map[uint64]bool
		p    int
		to   uint64 // 0: no move
	}{
		{"all here: partition 1 goes home to node 2", view3(1, []uint64{1, 1, 1}), nil, 1, 2},
		{"one moved: partition 2 goes home to node 3", view3(1, []uint64{1, 2, 1}), nil, 2, 3},
		{"spread: nothing moves", view3(1, []uint64{1, 2, 3}), nil, 0, 0},
		{"a difference of one does not move", view3(1, []uint64{1, 1, 2, 3, 2, 3, 1}), nil, 0, 0},
		{"not this node's: nothing moves", view3(2, []uint64{1, 1, 1}), nil, 0, 0},
		{"targets down: nothing moves", view3(1, []uint64{1, 1, 1}, 2, 3), nil, 0, 0},
		{"one target down: the other takes one", view3(1, []uint64{1, 1, 1}, 2), nil, 2, 3},
		{"an unhealthy target is skipped", view3(1, []uint64{1, 1, 1}), map[uint64]bool{2: true}, 2, 3},
		{"only non-busy partitions move", busy, nil, 0, 2},
		{"only to voters: partition 1 goes home to node 3", notVoter, nil, 1, 3},
		{"unknown leaders count for nobody: 2 here, 0 there", view3(1, []uint64{1, 0, 1}), nil, 2, 3},
		{"8 on two of three: the empty one first", view3(1, []uint64{1, 2, 1, 2, 1, 2, 1, 2}), nil, 2, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, to, ok := balanceMove(c.v, c.skip)
			if want := c.to != 0; ok != want || ok && (p != c.p || to != c.to) {
				t.Fatalf("got move of %d to %d (ok=%v), want %d to %d (ok=%v)", p, to, ok, c.p, c.to, want)
			}
		})
	}
}

// Moves applied one after another reach the fair share from any start and
// stop there: no member leads two more than another.
func TestBalanceMoveConverges(t *testing.T) {
	for _, start := range [][]uint64{
		{1, 1, 1}, {1, 1, 1, 1, 1, 1, 1, 1}, {2, 2, 2, 2, 2, 2, 2, 2}, {1, 2, 1, 2, 1, 2, 1, 2}, {3, 3, 3, 3, 3, 1},
	} {
		leaders := append([]uint64(nil), start...)
		for step := 0; ; step++ {
			if step > len(leaders) {
				t.Fatalf("start %v: still moving after %d moves: %v", start, step, leaders)
			}
			moved := false
			for self := uint64(1); self <= 3; self++ {
				if p, to, ok := balanceMove(view3(self, leaders), nil); ok {
					leaders[p] = to
					moved = true
					break
				}
			}
			if !moved {
				break
			}
		}
		leads := map[uint64]int{}
		for _, id := range leaders {
			leads[id]++
		}
		lo, hi := len(leaders)/3, (len(leaders)+2)/3
		for id := uint64(1); id <= 3; id++ {
			if leads[id] < lo || leads[id] > hi {
				t.Fatalf("start %v ended %v: node %d leads %d, want %d–%d", start, leaders, id, leads[id], lo, hi)
			}
		}
	}
}
