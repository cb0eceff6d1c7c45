//! Counted loops whose body is a set of blocks rather than one slot range: several back edges
//! to one header (clang's `if`/`else if` chains that each jump back to the shared counter
//! step, classify's loop), slots of the body placed after its exit test, and the rotated form
//! entered mid-body (`goto test; body: ...; test: if ... goto body`, stats64's loop). Their
//! body is a strongly connected region of the control flow, charged as a whole before it runs
//! like [`super::counted_loops`]' ranges ([`crate::cfg::Cfg::precharge`]).
//!
//! A region `B` (a strongly connected component of a function's control flow, of more than
//! one slot or with a self edge) qualifies when all of this holds:
//! - exactly one slot of `B`, the header `h` (not the function's start), has an edge into it
//!   from outside `B`: `B` is entered only at `h`, so `h` dominates `B`, and every edge from
//!   `B` to `h` is a back edge;
//! - with the back edges cut, `B` is acyclic (no inner loop: no charge point is needed inside,
//!   and an iteration's longest path is a longest path in a DAG); `B` makes no call; no slot of
//!   `B` is the header of a loop [`super::counted_loops`] counted;
//! - one register `r` is written exactly once in `B`, by `r += c` (`c != 0` a constant), at a
//!   slot every path from `h` to a back edge passes through (so every iteration runs it
//!   exactly once: at most once because the cut body is acyclic);
//! - the range analysis bounds `r` at `h` exactly as for a range loop
//!   ([`super::counter_trips`]: no wrap of `r + c`).
//!
//! Then the values of `r` at successive visits of `h` within one entry are strictly monotonic
//! inside `[a, b]`, so `h` runs at most `(b - a) / |c| + 1` times, as for a range loop.
//! Finding them costs O(slots): one Tarjan pass per function, then each component (they are
//! disjoint) is scanned a constant number of times.

use super::{counter_trips, is_cond_jump, written, CountedLoop};
use crate::cfg::Cfg;
use crate::insn::{Insn, BPF_K};
use crate::program::Program;
use crate::ranges::State;

/// A counted loop whose body is the set of slots `body` (module documentation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BlockLoop {
    /// `header`: the only entry; `latch`: the body's highest slot (not a back edge in
    /// general); `trips`, `exact` as for a range loop.
    pub l: CountedLoop,
    /// The body's slots, sorted (second halves of `lddw` left out).
    pub body: Vec<usize>,
    /// The longest path from the header back to it, in instructions, both ends included.
    pub iteration: u64,
}

/// The counted loops of every function whose body is not a slot range, given the range
/// loops already counted (`simple`, sorted by header) and the range analysis' states.
pub(crate) fn block_loops(
    prog: &Program,
    cfg: &Cfg,
    states: &[Vec<State>],
    simple: &[CountedLoop],
) -> Vec<BlockLoop> {
    let mut out = Vec::new();
    for f in 0..cfg.functions().len() {
        let range = cfg.func_range(f);
        // Every cycle holds a backward jump; one whose target heads a range loop counted
        // lies in that loop's component, which is not tried: so only a function with a
        // backward jump to another slot may hold a loop of blocks.
        let simple_header = |s: usize| simple.binary_search_by_key(&s, |l| l.header).is_ok();
        let other_back = (range.0..range.1).any(|pc| {
            !cfg.is_second_half(pc)
                && cfg
                    .successors(&prog.insns, pc)
                    .into_iter()
                    .flatten()
                    .any(|s| s <= pc && !simple_header(s))
        });
        if !other_back {
            continue;
        }
        let (comp, count) = components(&prog.insns, cfg, range);
        let entry = entries(&prog.insns, cfg, range, (&comp, count));
        for body in group((&comp, count), range) {
            if body.iter().any(|&pc| simple_header(pc)) {
                continue;
            }
            if let Some(l) = qualify(prog, cfg, states, range.0, (&comp, &entry), body) {
                out.push(l);
            }
        }
    }
    out.sort_unstable_by_key(|l| l.l.header);
    out
}

/// No slot (no component, no entry).
const NONE: u32 = u32::MAX;
/// More than one entry.
const MANY: u32 = u32::MAX - 1;

/// Per component (`comp` and `count` from [`components`]), its one entry: the slot of it
/// that edges from outside it reach (`NONE` for none, `MANY` for more than one).
fn entries(
    insns: &[Insn],
    cfg: &Cfg,
    (start, end): (usize, usize),
    (comp, count): (&[u32], usize),
) -> Vec<u32> {
    let mut entry = vec![NONE; count];
    for pc in (start..end).filter(|&pc| !cfg.is_second_half(pc)) {
        for s in cfg.successors(insns, pc).into_iter().flatten() {
            let c = comp[s - start];
            if c == comp[pc - start] {
                continue;
            }
            let e = &mut entry[c as usize];
            let s = u32::try_from(s).unwrap_or(MANY);
            *e = if *e == NONE || *e == s { s } else { MANY };
        }
    }
    entry
}

/// Per slot of the function `[start, end)`, the index of its strongly connected component
/// (`NONE` for second halves), by Tarjan's algorithm without recursion; and how many
/// components there are.
fn components(insns: &[Insn], cfg: &Cfg, (start, end): (usize, usize)) -> (Vec<u32>, usize) {
    let n = end - start;
    let mut index = vec![NONE; n];
    let mut low = vec![0u32; n];
    let mut on_stack = vec![false; n];
    let mut comp = vec![NONE; n];
    let mut stack: Vec<usize> = Vec::new();
    // (slot, next successor to look at)
    let mut calls: Vec<(usize, usize)> = Vec::new();
    let (mut next_index, mut next_comp) = (0u32, 0u32);
    let succ = |pc: usize, k: usize| cfg.successors(insns, pc + start)[k].map(|s| s - start);
    for root in (0..n).filter(|&pc| !cfg.is_second_half(pc + start)) {
        if index[root] != NONE {
            continue;
        }
        calls.push((root, 0));
        while let Some(&mut (v, ref mut k)) = calls.last_mut() {
            if *k == 0 && index[v] == NONE {
                (index[v], low[v]) = (next_index, next_index);
                next_index += 1;
                stack.push(v);
                on_stack[v] = true;
            }
            if *k < 2 {
                let at = *k;
                *k += 1;
                if let Some(w) = succ(v, at) {
                    if index[w] == NONE {
                        calls.push((w, 0));
                    } else if on_stack[w] {
                        low[v] = low[v].min(index[w]);
                    }
                }
                continue;
            }
            calls.pop();
            if let Some(&(parent, _)) = calls.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == index[v] {
                loop {
                    let w = stack.pop().expect("v is on the stack");
                    on_stack[w] = false;
                    comp[w] = next_comp;
                    if w == v {
                        break;
                    }
                }
                next_comp += 1;
            }
        }
    }
    (comp, next_comp as usize)
}

/// The components of more than one slot, or of one slot jumping to itself, as sorted lists of
/// absolute slots.
fn group((comp, count): (&[u32], usize), (start, _): (usize, usize)) -> Vec<Vec<usize>> {
    let mut sizes = vec![0u32; count];
    for &c in comp.iter().filter(|&&c| c != NONE) {
        sizes[c as usize] += 1;
    }
    let mut groups: Vec<Vec<usize>> = vec![Vec::new(); count];
    for (k, &c) in comp.iter().enumerate() {
        if c != NONE && sizes[c as usize] > 1 {
            groups[c as usize].push(start + k);
        }
    }
    // A one-slot cycle (`if r != k goto -1`) is a range loop's shape; left to it.
    groups.retain(|g| !g.is_empty());
    groups
}

/// The loop of component `body` if it qualifies (module documentation).
fn qualify(
    prog: &Program,
    cfg: &Cfg,
    states: &[Vec<State>],
    start: usize,
    (comp, entry): (&[u32], &[u32]),
    body: Vec<usize>,
) -> Option<BlockLoop> {
    let insns = &prog.insns;
    let header = entry[comp[body[0] - start] as usize];
    // The function's start is entered from its caller: a body holding it has two entries.
    if header == NONE
        || header == MANY
        || body[0] == start
        || body.iter().any(|&pc| insns[pc].is_call())
    {
        return None;
    }
    let header = header as usize;
    let order = topological(insns, cfg, &body, header)?;
    let iteration = longest_iteration(insns, cfg, &body, header, &order);
    let reaching = states.get(header).filter(|s| !s.is_empty())?;
    let exits = exiting_slots(insns, cfg, &body);
    let trips = (0..10u8).filter_map(|r| {
        let [at] = writes(insns, &body, r)[..] else { return None };
        if !on_every_iteration(insns, cfg, &body, header, at) {
            return None;
        }
        let trips = counter_trips(insns[at], r, reaching)?;
        let t = insns[exits.first().copied()?];
        // (An `exit` reaches no header: it is never in a body, only past an exit edge.)
        let exact = exits.len() == 1 && is_cond_jump(t) && t.dst == r && t.op & 0x08 == BPF_K;
        Some((trips, exact))
    });
    let (trips, exact) = trips.min_by_key(|&(t, exact)| (t, !exact))?;
    let latch = *body.last()?;
    Some(BlockLoop { l: CountedLoop { header, latch, trips, exact }, body, iteration })
}

/// The slots of `body` that write `r`.
fn writes(insns: &[Insn], body: &[usize], r: u8) -> Vec<usize> {
    body.iter().copied().filter(|&pc| written(insns[pc]).contains(&Some(r))).collect()
}

/// The slots of `body` with an edge out of it.
fn exiting_slots(insns: &[Insn], cfg: &Cfg, body: &[usize]) -> Vec<usize> {
    let out = |pc: &usize| {
        cfg.successors(insns, *pc).iter().flatten().any(|s| body.binary_search(s).is_err())
    };
    body.iter().copied().filter(out).collect()
}

/// The slots of `body` in an order where every edge inside it, back edges to `header` left
/// out, goes from a later slot to an earlier one (successors first); `None` if those edges
/// make a cycle (an inner loop).
fn topological(insns: &[Insn], cfg: &Cfg, body: &[usize], header: usize) -> Option<Vec<usize>> {
    let pos = |s: usize| body.binary_search(&s).ok();
    let inner = |pc: usize| {
        cfg.successors(insns, pc).into_iter().flatten().filter(|&s| s != header).filter_map(pos)
    };
    let mut indegree = vec![0u32; body.len()];
    for &pc in body {
        for k in inner(pc) {
            indegree[k] += 1;
        }
    }
    // Kahn's algorithm: a slot is emitted after all its predecessors; reversed at the end.
    let mut ready: Vec<usize> = (0..body.len()).filter(|&k| indegree[k] == 0).collect();
    let mut order = Vec::with_capacity(body.len());
    while let Some(k) = ready.pop() {
        order.push(body[k]);
        for j in inner(body[k]) {
            indegree[j] -= 1;
            if indegree[j] == 0 {
                ready.push(j);
            }
        }
    }
    order.reverse();
    (order.len() == body.len()).then_some(order)
}

/// The longest path from `header` back to it (module documentation), given `order`
/// ([`topological`]).
fn longest_iteration(
    insns: &[Insn],
    cfg: &Cfg,
    body: &[usize],
    header: usize,
    order: &[usize],
) -> u64 {
    let mut cycle = vec![None::<u64>; body.len()];
    for &pc in order {
        let mut best = None;
        for s in cfg.successors(insns, pc).into_iter().flatten() {
            if s == header {
                best = best.max(Some(0));
            } else if let Ok(k) = body.binary_search(&s) {
                best = best.max(cycle[k]);
            }
        }
        cycle[body.binary_search(&pc).expect("in the body")] = best.map(|c| c + 1);
    }
    cycle[body.binary_search(&header).expect("in the body")].unwrap_or(0)
}

/// Whether every path from `header` to a back edge passes through `at`.
fn on_every_iteration(insns: &[Insn], cfg: &Cfg, body: &[usize], header: usize, at: usize) -> bool {
    if at == header {
        return true;
    }
    let mut seen = vec![false; body.len()];
    let mut todo = vec![header];
    while let Some(pc) = todo.pop() {
        for s in cfg.successors(insns, pc).into_iter().flatten() {
            if s == header {
                return false;
            }
            let Ok(k) = body.binary_search(&s) else { continue };
            if s != at && !seen[k] {
                seen[k] = true;
                todo.push(s);
            }
        }
    }
    true
}

#[cfg(test)]
mod tests;
