#!/usr/bin/env python3
"""A model of the WiredTiger function store's leaf cache under YCSB-C (docs/results/ycsb.md):
hit rates of CLOCK alone, behind a doorkeeper (RocksDB's data cache) and behind a count-min
frequency sketch (storefn-io's FrequencySketch, as TreeCache uses it), against the best a cache
of that many leaves can do.

YCSB's scrambled zipfian (0.99) draws from 10^10 items and hashes them onto the records, so a
record's probability is its own rank's zipfian term plus an even share of the items past the
record count (the near-uniform tail); records are placed on leaves at random (a hash of the
key decides a YCSB key's place in the tree).

    python3 bench/leaf_cache_model.py [--slots 960] [--accesses 400000] [--seed 1]
"""
import argparse, itertools, random

ZETAN_10E10 = 26.46902820178302  # zeta(10^10, 0.99): YCSB's precomputed constant

ap = argparse.ArgumentParser()
ap.add_argument("--records", type=int, default=700_000)
ap.add_argument("--leaves", type=int, default=25_926)
ap.add_argument("--slots", type=int, default=960)
ap.add_argument("--accesses", type=int, default=400_000)
ap.add_argument("--seed", type=int, default=1)
a = ap.parse_args()
random.seed(a.seed)
N, L, S, T = a.records, a.leaves, a.slots, a.accesses
head = [(i + 1) ** -0.99 / ZETAN_10E10 for i in range(N)]
tail = 1 - sum(head)
p = [x + tail / N for x in head]
perm = list(range(N))
random.shuffle(perm)
leaf_of = [x % L for x in perm]
lp = [0.0] * L
for i in range(N):
    lp[leaf_of[i]] += p[i]
print(f"tail share {tail:.3f}; best hit rate of {S} leaves {sum(sorted(lp, reverse=True)[:S]):.3f}")
acc = [leaf_of[i] for i in random.choices(range(N), cum_weights=list(itertools.accumulate(p)), k=T)]


def clock(admit=None, record=None):
    """Hit rate over the last two thirds of the accesses (the first third warms the cache)."""
    slots, ref, where, hand, hits = [None] * S, [False] * S, {}, 0, 0
    for t, x in enumerate(acc):
        if record:
            record(x)
        i = where.get(x)
        if i is not None:
            ref[i] = True
            hits += t > T // 3
            continue
        while slots[hand] is not None and ref[hand]:
            ref[hand] = False
            hand = (hand + 1) % S
        v = slots[hand]
        if admit and v is not None and not admit(x, v):
            continue  # the hand stays on the victim
        if v is not None:
            del where[v]
        slots[hand], ref[hand], where[x], hand = x, True, hand, (hand + 1) % S
    return hits / (T - T // 3)


class Doorkeeper:
    def __init__(self, bits):
        self.n, self.seen = bits, set()

    def __call__(self, x, _victim):
        if x in self.seen:
            return True
        self.seen.add(x)
        if len(self.seen) >= self.n // 4:
            self.seen.clear()
        return False


class Sketch:
    """4 saturating 4-bit counters per key over words_per_entry * 16 counters per slot, halved
    every samples_per_entry * slots records."""

    def __init__(self, words_per_entry, samples_per_entry=100):
        w = 1
        while w < S * words_per_entry:
            w *= 2
        self.c, self.n, self.cap = [0] * (w * 16), 0, S * samples_per_entry

    def idx(self, x):
        return [hash((x, q)) % len(self.c) for q in range(4)]

    def record(self, x):
        for i in self.idx(x):
            self.c[i] = min(15, self.c[i] + 1)
        self.n += 1
        if self.n >= self.cap:
            self.c, self.n = [v >> 1 for v in self.c], 0

    def __call__(self, x, victim):
        return min(self.c[i] for i in self.idx(x)) > min(self.c[i] for i in self.idx(victim))


print(f"CLOCK {clock():.3f}")
print(f"CLOCK + doorkeeper (8 bits per 4 KiB of cache) {clock(Doorkeeper(S * 8 * 8)):.3f}")
for wpe in (1, 16):
    s = Sketch(wpe)
    print(f"CLOCK + frequency sketch ({wpe} words per slot) {clock(s, s.record):.3f}")
