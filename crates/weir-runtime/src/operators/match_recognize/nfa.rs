//! The pattern as a state machine over one partition's rows, as Flink's CEP NFA runs a
//! `MATCH_RECOGNIZE` (strict contiguity: each row goes to the next variable or nowhere).
//!
//! A partial match is a position in the pattern (which variable, how many rows it has taken)
//! and its path: the rows mapped so far, newest first. Paths are shared: two branches that
//! took the same rows point to the same [`Node`]s, and a row is held once ([`Event`]),
//! however many branches read it. Flink's semantics, which this follows:
//! - every row may start a match; all branches of the pattern are followed at once;
//! - a greedy quantifier leaves its variable only on a row its condition rejects;
//! - a finished match waits until no partial match that started earlier is alive, then is
//!   emitted, and the skip strategy prunes the partial and finished matches it overlaps;
//! - with `WITHIN`, a partial match whose first row is that long before the row (or the
//!   watermark) being processed is dropped.

use std::rc::Rc;

use datafusion::common::ScalarValue;
use weir_core::{Result, WeirError};

use super::expr::{MatchExpr, Scope};

/// A row kept for matching: its time, its arrival order, and the columns the expressions
/// read.
#[derive(Debug)]
pub struct Event {
    pub time: i64,
    pub seq: u64,
    pub values: Vec<ScalarValue>,
    /// The same columns in Arrow's row format, as stored.
    pub row: Box<[u8]>,
}

impl Event {
    pub fn id(&self) -> (i64, u64) {
        (self.time, self.seq)
    }
}

/// One mapped row of a path, pointing to the row mapped before it.
#[derive(Debug)]
pub struct Node {
    pub event: Rc<Event>,
    pub var: u16,
    pub prev: Option<Rc<Node>>,
}

/// One variable of the pattern with its quantifier.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Step {
    pub var: u16,
    pub min: u32,
    /// `None`: no upper bound.
    pub max: Option<u32>,
    pub greedy: bool,
    /// The previous step is a greedy range (`A{1,3} B`): as Flink's NFA compiler makes it,
    /// a row this step would begin with must not be one the previous variable takes.
    pub guarded: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Skip {
    PastLastRow,
    ToNextRow,
    ToFirst(u16),
    ToLast(u16),
}

/// The pattern: steps, each variable's condition (`None`: any row), the skip strategy.
#[derive(Debug, Clone)]
pub struct Pattern {
    pub steps: Vec<Step>,
    pub conditions: Vec<Option<MatchExpr>>,
    pub names: Vec<String>,
    pub skip: Skip,
    /// `WITHIN`, in milliseconds.
    pub within: Option<i64>,
}

#[derive(Debug, Clone)]
pub struct Partial {
    pub step: usize,
    pub taken: u32,
    pub path: Option<Rc<Node>>,
    pub start: (i64, u64),
}

#[derive(Debug, Clone)]
pub struct Finished {
    pub path: Rc<Node>,
    pub start: (i64, u64),
}

/// A partition's matching state.
#[derive(Debug, Default)]
pub struct Machine {
    pub partials: Vec<Partial>,
    pub finished: Vec<Finished>,
}

impl Pattern {
    fn take(&self, step: usize, path: Option<&Node>, event: &Event) -> Result<bool> {
        let var = self.steps[step].var;
        match &self.conditions[var as usize] {
            None => Ok(true),
            Some(c) => c.holds(&Scope { path, current: Some((event, var)) }),
        }
    }

    /// Whether a branch at `step` having taken `taken` rows may go on to the next step
    /// without taking `event`: its minimum is reached and, greedy, `event` is not its own.
    fn may_leave(&self, step: usize, taken: u32, path: Option<&Node>, event: &Event) -> Result<bool> {
        let s = &self.steps[step];
        if taken < s.min {
            return Ok(false);
        }
        let more = s.max.is_none_or(|m| taken < m);
        Ok(!(s.greedy && more && self.take(step, path, event)?))
    }

    /// The branches `partial` becomes on `event`: for each step it can reach without taking
    /// a row, the branch that takes `event` there; and the matches that taking finishes.
    fn advance(
        &self,
        partial: &Partial,
        event: &Rc<Event>,
        out: &mut Vec<Partial>,
        done: &mut Vec<Finished>,
    ) -> Result<()> {
        let (mut step, mut taken) = (partial.step, partial.taken);
        let path = partial.path.as_deref();
        while step < self.steps.len() {
            let s = &self.steps[step];
            if s.guarded && taken == 0 && step > 0 && self.take(step - 1, path, event)? {
                break;
            }
            let room = s.max.is_none_or(|m| taken < m);
            let took = room && self.take(step, path, event)?;
            if took {
                let node = Rc::new(Node { event: event.clone(), var: s.var, prev: partial.path.clone() });
                let start = if partial.path.is_none() { event.id() } else { partial.start };
                let (next, count) = match s.max {
                    Some(m) if taken + 1 >= m => (step + 1, 0),
                    _ => (step, taken + 1),
                };
                if self.finishes(next, count, &node, event)? {
                    done.push(Finished { path: node.clone(), start });
                }
                if next < self.steps.len() {
                    out.push(Partial { step: next, taken: count, path: Some(node), start });
                }
            }
            // May it go on without taking the row? Not below its minimum, nor, greedy, on a
            // row it just took (the condition is evaluated once).
            if taken < s.min || (s.greedy && room && took) {
                break;
            }
            (step, taken) = (step + 1, 0);
        }
        Ok(())
    }

    /// Whether a branch just moved to `step` (having taken `taken` rows there) can reach the
    /// end without another row, as Flink checks right after a take.
    fn finishes(&self, mut step: usize, mut taken: u32, node: &Rc<Node>, event: &Event) -> Result<bool> {
        while step < self.steps.len() {
            let guarded = self.steps[step].guarded && taken == 0 && step > 0;
            if (guarded && self.take(step - 1, Some(node), event)?)
                || !self.may_leave(step, taken, Some(node), event)?
            {
                return Ok(false);
            }
            (step, taken) = (step + 1, 0);
        }
        Ok(true)
    }

    /// Process one row (rows of a partition come in time order, then arrival order).
    pub fn process(&self, m: &mut Machine, event: Rc<Event>, out: &mut Vec<Rc<Node>>) -> Result<()> {
        let mut next = Vec::with_capacity(m.partials.len() + 1);
        let mut done = Vec::new();
        for p in &m.partials {
            if self.within.is_some_and(|w| event.time.saturating_sub(p.start.0) >= w) {
                continue;
            }
            self.advance(p, &event, &mut next, &mut done)?;
        }
        // Every row may start a match.
        let start = Partial { step: 0, taken: 0, path: None, start: event.id() };
        self.advance(&start, &event, &mut next, &mut done)?;
        m.partials = next;
        m.finished.extend(done);
        self.emit(m, out)
    }

    /// The watermark reached `time`: partial matches that can no longer finish `WITHIN`
    /// are dropped, and finished matches they held back go out.
    pub fn advance_time(&self, m: &mut Machine, time: i64, out: &mut Vec<Rc<Node>>) -> Result<()> {
        if let Some(w) = self.within {
            m.partials.retain(|p| time.saturating_sub(p.start.0) < w);
        }
        self.emit(m, out)
    }

    /// What bounds the partial matches' state, for `EXPLAIN`: `WITHIN`, or else a warning
    /// when the first variable has no upper bound (every row starts a partial match that
    /// lives as long as rows keep matching it).
    pub fn state(&self) -> String {
        if let Some(w) = self.within {
            return format!(
                "each partition's partial matches and the rows they hold, each dropped {w} ms after its first row"
            );
        }
        match self.steps.first() {
            Some(s) if s.max.is_none() => {
                let name = self.names.get(s.var as usize).map_or("?", String::as_str);
                format!(
                    "warning: the pattern starts with {name} under a quantifier without an upper bound and has no \
                     WITHIN: a partial match lives as long as rows keep matching {name}, so the state can grow without \
                     bound; add WITHIN INTERVAL '…' after PATTERN (…), or bound the quantifier"
                )
            }
            _ => "each partition's partial matches and the rows they hold, until they fail or match".into(),
        }
    }

    /// The earliest time at which [`Self::advance_time`] drops a partial match.
    pub fn expiry(&self, m: &Machine) -> Option<i64> {
        let w = self.within?;
        m.partials.iter().map(|p| p.start.0.saturating_add(w)).min()
    }

    /// Emit finished matches that no earlier partial match holds back, pruning after each.
    fn emit(&self, m: &mut Machine, out: &mut Vec<Rc<Node>>) -> Result<()> {
        loop {
            let Some(first) = (0..m.finished.len()).min_by_key(|i| (m.finished[*i].start, *i)) else {
                return Ok(());
            };
            let earliest_partial = m.partials.iter().map(|p| p.start).min();
            if earliest_partial.is_some_and(|p| m.finished[first].start > p) {
                return Ok(());
            }
            let found = m.finished.remove(first);
            let (bound, inclusive) = self.pruning(&found)?;
            let keep = |start: (i64, u64)| if inclusive { start > bound } else { start >= bound };
            m.partials.retain(|p| keep(p.start));
            m.finished.retain(|f| keep(f.start));
            out.push(found.path);
        }
    }

    /// Where matching resumes after `found`: matches starting at or before (`inclusive`) or
    /// before the returned row are pruned.
    fn pruning(&self, found: &Finished) -> Result<((i64, u64), bool)> {
        let rows: Vec<(&Event, u16)> = path_rows(&found.path);
        let last = rows.first().map(|(e, _)| e.id()).unwrap_or(found.start);
        Ok(match self.skip {
            Skip::PastLastRow => (last, true),
            Skip::ToNextRow => (found.start, true),
            Skip::ToFirst(v) | Skip::ToLast(v) => {
                let mut of_var = rows.iter().filter(|(_, w)| *w == v).map(|(e, _)| e.id());
                let at = match self.skip {
                    Skip::ToLast(_) => of_var.next(),
                    _ => of_var.last(),
                };
                // Flink fails the job in both cases (its `throwExceptionOnMiss`); so does Weir.
                let name = self.names.get(v as usize).map_or("?", String::as_str);
                let at = at.ok_or_else(|| {
                    WeirError::user(format!(
                        "MATCH_RECOGNIZE could not skip to {name}: a match has no row mapped to {name} (AFTER MATCH \
                         SKIP TO … {name})"
                    ))
                })?;
                if at == found.start {
                    return Err(WeirError::user(format!(
                        "MATCH_RECOGNIZE could not skip to the first row of a match: AFTER MATCH SKIP TO … {name} lands \
                         where the match started, and would find it again forever"
                    )));
                }
                (at, false)
            }
        })
    }
}

/// A path's rows, newest first.
pub fn path_rows(path: &Rc<Node>) -> Vec<(&Event, u16)> {
    let mut rows = Vec::new();
    let mut node = Some(path.as_ref());
    while let Some(n) = node {
        rows.push((n.event.as_ref(), n.var));
        node = n.prev.as_deref();
    }
    rows
}
