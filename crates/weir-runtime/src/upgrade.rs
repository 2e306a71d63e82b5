//! What becomes of each part of a checkpoint's state when a job of another plan starts on it:
//! the verdicts `weir upgrade --check` prints, and the same check on every restore.
//!
//! Parts are matched by stable identity ([`crate::identity`]): the same id is the same state
//! (**kept**). In the same slot under another id, the manifest's shape of the old part tells
//! what changed:
//! - a scan of the same connector that reads other columns: its position does not depend on
//!   the columns, so it is **migrated** (restored under the new id);
//! - a watermark operator that passes on other columns: its state is one timestamp, so it is
//!   **migrated** the same way. Any other operator whose output changed is refused: its output
//!   names what its state is about (a group aggregate's shape counts its keys, its output says
//!   which columns they are);
//! - a sink of another connector: its last pre-commits would have no one to publish them.
//!   After a savepoint they were published before the job stopped, so the new sink is
//!   **new**; after a checkpoint they are refused unless dropping them is asked for;
//! - a scan of another connector is **refused**: the position means nothing to it;
//! - any other operator whose state would be read the wrong way is **rebuilt** by replay,
//!   both shapes named: it starts empty, and the scans feeding it read their input again
//!   from where their tables start up to the checkpoint's positions, while the sinks drop
//!   what comes of that; the first checkpoint after the replay is the cut-over, from which
//!   the sinks write again. Every INSERT sharing a scan with it replays too (see
//!   [`rebuild`]). Where a scan cannot read its input again (a Kafka table started at the
//!   latest offset, a connector that cannot), it is **refused** instead, and why.
//!
//! A part of the plan the checkpoint lacks is **new** (it starts empty). State no part claims
//! is **dropped** only with Flink's `execution.savepoint.ignore-unclaimed-state`, as Flink
//! drops a savepoint's unclaimed state only when told; otherwise it is refused. Parts without
//! state in the checkpoint (a print sink, an operator that kept nothing) are never refused:
//! nothing is lost.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use crate::checkpoint::{PlanState, Restored};

/// A part of the plan that wrote a checkpoint, as its manifest lists it.
#[derive(Debug, Clone)]
pub struct OldPart {
    pub id: String,
    pub slot: String,
    pub name: String,
    /// Whether the checkpoint holds state of it.
    pub has_state: bool,
    /// Its shape and output ([`crate::identity::StatePart`]); `None` in manifests written
    /// before Weir kept them.
    pub shape: Option<(String, String)>,
}

impl OldPart {
    /// A part as a manifest lists it.
    pub fn of_manifest(p: &serde_json::Value) -> Self {
        let text = |k: &str| p[k].as_str().unwrap_or_default().to_string();
        let shape = match (p["shape"].as_str(), p["output"].as_str()) {
            (Some(s), Some(o)) => Some((s.to_string(), o.to_string())),
            _ => None,
        };
        OldPart { id: text("id"), slot: text("slot"), name: text("name"), has_state: p["has_state"] != false, shape }
    }
}

/// What becomes of one part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The same state, restored as is.
    Kept,
    /// The state is restored under the part's new id; how, said.
    Migrated(String),
    /// Started empty and refilled by reading its sources again up to the checkpoint's
    /// positions, its output dropped until then; why.
    Rebuilt(String),
    /// No state to restore: it starts empty.
    New(String),
    /// State in the checkpoint that the job no longer has a part for.
    Dropped(String),
    /// The job cannot start on this checkpoint with exactly-once results, and why.
    Refused(String),
}

impl Verdict {
    pub fn word(&self) -> &'static str {
        match self {
            Verdict::Kept => "kept",
            Verdict::Migrated(_) => "migrated",
            Verdict::Rebuilt(_) => "rebuilt",
            Verdict::New(_) => "new",
            Verdict::Dropped(_) => "dropped",
            Verdict::Refused(_) => "refused",
        }
    }

    pub fn why(&self) -> Option<&str> {
        match self {
            Verdict::Kept => None,
            Verdict::Migrated(w)
            | Verdict::Rebuilt(w)
            | Verdict::New(w)
            | Verdict::Dropped(w)
            | Verdict::Refused(w) => Some(w),
        }
    }
}

/// One part's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The part's name in the new plan (in the checkpoint, for a dropped one).
    pub name: String,
    /// Its id in the new plan (in the checkpoint, for a dropped one).
    pub id: String,
    /// The id of the state it takes, where that is another.
    pub was: Option<String>,
    pub verdict: Verdict,
}

/// The verdicts on every part of a plan and of a checkpoint.
#[derive(Debug, Clone, Default)]
pub struct Upgrade {
    pub entries: Vec<Entry>,
    /// The checkpoint is a savepoint.
    pub savepoint: bool,
    /// The checkpoint's format version ([`crate::checkpoint::MANIFEST_VERSION`] if written by
    /// this Weir).
    pub format: u64,
    /// Old id to new id, for the state migrated.
    renames: BTreeMap<String, String>,
    /// Operators (old and new ids) whose state is not restored: they are rebuilt.
    cleared: BTreeSet<String>,
    /// Scans that replay, and sinks whose input is dropped until the replay is over.
    replay: BTreeSet<String>,
    suppress: BTreeSet<String>,
}

/// How the checkpoint was taken, as far as the verdicts care.
#[derive(Debug, Clone, Copy, Default)]
pub struct Taken {
    /// A savepoint: the job stopped after it, and its sinks published its pre-commits.
    pub published: bool,
}

/// The verdict on each part of `plan` and on each part of the checkpoint it does not claim.
pub fn verdicts(old: &[OldPart], plan: &PlanState, taken: Taken) -> Upgrade {
    let mut up =
        Upgrade { savepoint: taken.published, format: crate::checkpoint::MANIFEST_VERSION, ..Default::default() };
    for p in &plan.parts {
        let same_id = old.iter().find(|o| o.id == p.id);
        let same_slot = old.iter().find(|o| o.slot == p.slot);
        let entry = |was: Option<&OldPart>, verdict| Entry {
            name: p.name.clone(),
            id: p.id.clone(),
            was: was.map(|o| o.id.clone()),
            verdict,
        };
        let e = match (same_id, same_slot) {
            (Some(_), _) => entry(None, Verdict::Kept),
            (None, None) => entry(None, Verdict::New(new_part(&p.slot))),
            (None, Some(o)) if !o.has_state => entry(
                Some(o),
                Verdict::New(format!("the checkpoint holds no state of '{}', which was in its place", o.name)),
            ),
            (None, Some(o)) if p.slot.starts_with("sink ") => {
                let connectors = match &o.shape {
                    Some((was, _)) => format!(" ({was} replaced by {})", p.shape),
                    None => String::new(),
                };
                let verdict = if taken.published {
                    Verdict::New(format!(
                        "replaces '{}'{connectors}, whose pre-commits were published before the savepoint",
                        o.name
                    ))
                } else if plan.ignore_unclaimed {
                    Verdict::Dropped(format!(
                        "replaces '{}'{connectors}: its pre-commits in the checkpoint are dropped, as asked",
                        o.name
                    ))
                } else {
                    Verdict::Refused(format!(
                        "replaces the sink of id {}{connectors}, whose pre-commits in the checkpoint would be dropped \
                         (SET 'execution.savepoint.ignore-unclaimed-state' = 'true' to drop them, or start from a \
                         savepoint, after which they are published)",
                        o.id
                    ))
                };
                entry(Some(o), verdict)
            }
            (None, Some(o)) => {
                let verdict = changed(o, p);
                if matches!(verdict, Verdict::Migrated(_)) {
                    up.renames.insert(o.id.clone(), p.id.clone());
                }
                entry(Some(o), verdict)
            }
        };
        up.entries.push(e);
    }
    for o in old.iter().filter(|o| o.has_state) {
        if plan.parts.iter().any(|p| p.id == o.id || p.slot == o.slot) {
            continue;
        }
        let verdict = if o.slot.starts_with("sink ") && taken.published {
            Verdict::Dropped("its INSERT is gone; its pre-commits were published before the savepoint".into())
        } else if plan.ignore_unclaimed {
            Verdict::Dropped("no part of the job claims it; dropped, as asked".into())
        } else {
            Verdict::Refused(
                "no part of this job claims it (SET 'execution.savepoint.ignore-unclaimed-state' = 'true' to drop it)"
                    .into(),
            )
        };
        up.entries.push(Entry { name: o.name.clone(), id: o.id.clone(), was: None, verdict });
    }
    if plan.rebuild_all {
        for e in up.entries.iter_mut() {
            let slot = plan.parts.iter().find(|p| p.id == e.id).map(|p| p.slot.as_str()).unwrap_or("scan");
            let restored = matches!(e.verdict, Verdict::Kept | Verdict::Migrated(_));
            if restored && !slot.starts_with("scan ") && !slot.starts_with("sink ") {
                e.verdict = Verdict::Rebuilt(
                    "rebuilt by reading its input again, as asked \
                    ('execution.savepoint.rebuild' = 'all')"
                        .into(),
                );
            }
        }
    }
    rebuild(&mut up, plan);
    up
}

/// INSERTs that share a scan share its input, so a replay for an operator of one feeds them
/// all: every stateful operator among them starts empty and is rebuilt by the same replay
/// (state restored and then fed the replay would count everything twice), every scan among
/// them replays, and every sink among them drops its input until the replay is over. Where a
/// scan among them cannot read its input again, the operators that needed rebuilding are
/// refused instead.
fn rebuild(up: &mut Upgrade, plan: &PlanState) {
    let n = plan.branches.len();
    let mut group: Vec<usize> = (0..n).collect();
    fn root(group: &[usize], mut i: usize) -> usize {
        while group[i] != i {
            i = group[i];
        }
        i
    }
    for i in 0..n {
        for j in 0..i {
            if plan.branches[i].iter().any(|id| plan.branches[j].contains(id)) {
                let (a, b) = (root(&group, i), root(&group, j));
                group[a] = b;
            }
        }
    }
    for c in (0..n).filter(|c| root(&group, *c) == *c) {
        let ids: BTreeSet<&String> =
            (0..n).filter(|i| root(&group, *i) == c).flat_map(|i| plan.branches[i].iter()).collect();
        let Some(cause) = up
            .entries
            .iter()
            .find(|e| ids.contains(&e.id) && matches!(e.verdict, Verdict::Rebuilt(_)))
            .map(|e| e.name.clone())
        else {
            continue;
        };
        let slot_of = |id: &str| plan.parts.iter().find(|p| p.id == id).map(|p| p.slot.as_str()).unwrap_or_default();
        let blocked = plan.unreplayable.iter().find(|(scan, _)| ids.contains(scan)).map(|(scan, why)| {
            let table = slot_of(scan).trim_start_matches("scan ");
            format!("its input cannot be read again to rebuild it: table '{table}': {why}")
        });
        for e in up.entries.iter_mut().filter(|e| ids.contains(&e.id)) {
            let slot = slot_of(&e.id);
            if let Some(why) = &blocked {
                if let Verdict::Rebuilt(what) = &e.verdict {
                    e.verdict = Verdict::Refused(format!("{what}; {why}"));
                }
                continue;
            }
            if slot.starts_with("sink ") {
                up.suppress.insert(e.id.clone());
            } else if slot.starts_with("scan ") {
                if matches!(e.verdict, Verdict::New(_)) {
                    // Read from its start only after the cut-over: what it read before would
                    // be in the rebuilt state with its output dropped, and written nowhere.
                    up.replay.insert(e.id.clone());
                    e.verdict = Verdict::New(format!(
                        "a scan the checkpoint lacks: it reads from its table's configured start once the replay for \
                         '{cause}' is over"
                    ));
                } else if matches!(e.verdict, Verdict::Kept | Verdict::Migrated(_)) {
                    up.replay.insert(e.id.clone());
                    e.verdict = Verdict::Rebuilt(format!(
                        "reads its input again from where the table starts up to the checkpoint's position, for \
                         '{cause}'; what the replay yields is not written to any sink, and it goes on from that position"
                    ));
                }
            } else {
                if !matches!(e.verdict, Verdict::Rebuilt(_)) {
                    e.verdict = Verdict::Rebuilt(format!(
                        "shares its input with '{cause}', which is rebuilt: it starts empty too and is refilled by the \
                         same replay"
                    ));
                }
                up.cleared.insert(e.id.clone());
                if let Some(was) = &e.was {
                    up.renames.remove(was);
                    up.cleared.insert(was.clone());
                }
            }
        }
    }
}

/// The shapes of operators whose state is the watermark alone.
const WATERMARKS: [&str; 2] = ["watermark", "processing-time watermark"];

/// What a part with no state to restore starts from.
fn new_part(slot: &str) -> String {
    match slot.split_once(' ') {
        Some(("scan", _)) => "a scan the checkpoint lacks: it reads from the table's configured start".into(),
        Some(("sink", _)) => "a sink the checkpoint lacks".into(),
        _ => "starts with no state: it sees the input from the checkpoint's positions on".into(),
    }
}

/// The verdict on `p`, in the slot where the checkpoint holds the state of `o`, another id.
fn changed(o: &OldPart, p: &crate::identity::StatePart) -> Verdict {
    let Some((shape, output)) = &o.shape else {
        let what = format!(
            "has changed: the checkpoint holds the state of '{}' (id {}) in its place, of a shape its manifest does \
             not record",
            o.name, o.id
        );
        return match p.slot.starts_with("scan ") {
            true => Verdict::Refused(what),
            false => Verdict::Rebuilt(format!("{what}: it starts empty and is refilled by reading its input again")),
        };
    };
    if *shape == p.shape && p.slot.starts_with("scan ") {
        return Verdict::Migrated(format!(
            "reads other columns ({output} before, {} now); its position is kept",
            p.output
        ));
    }
    // An operator's output names what its state is about (a group aggregate's shape counts
    // its keys; its output says which columns they are): only a watermark's state (one
    // timestamp per task) means the same whatever columns pass.
    if *shape == p.shape && WATERMARKS.contains(&shape.as_str()) {
        return Verdict::Migrated(format!(
            "passes on other columns ({output} before, {} now); its watermark is kept",
            p.output
        ));
    }
    if p.slot.starts_with("scan ") {
        return Verdict::Refused(format!(
            "reads another connector's input ({shape} before, {} now): the checkpoint's position means nothing to it",
            p.shape
        ));
    }
    Verdict::Rebuilt(format!(
        "has changed: the checkpoint holds the state of '{}' (id {}) in its place, which keeps {shape} {output}, and \
         it keeps {} {}: it starts empty and is refilled by reading its input again",
        o.name, o.id, p.shape, p.output
    ))
}

impl Upgrade {
    /// Every part kept as it was (a checkpoint of format version 1, which fits its plan only:
    /// an earlier release's, whose state is keyed by place).
    pub fn all_kept(plan: &PlanState) -> Self {
        let entries = plan
            .parts
            .iter()
            .map(|p| Entry { name: p.name.clone(), id: p.id.clone(), was: None, verdict: Verdict::Kept })
            .collect();
        Upgrade { entries, format: 1, ..Default::default() }
    }

    /// Every refusal, in one line; `None` if the job may start.
    pub fn refusal(&self) -> Option<String> {
        let refused: Vec<String> = self
            .entries
            .iter()
            .filter_map(|e| match &e.verdict {
                Verdict::Refused(why) => Some(format!("'{}' (id {}) {why}", e.name, e.id)),
                _ => None,
            })
            .collect();
        (!refused.is_empty()).then(|| refused.join("; "))
    }

    /// The checkpoint's state keyed by the new plan's ids.
    pub fn apply(&self, restored: &mut Restored) {
        restored.replay.clone_from(&self.replay);
        restored.suppress.clone_from(&self.suppress);
        restored.rebuilt.clone_from(&self.cleared);
        for task in restored.tasks.values_mut() {
            task.operators.retain(|id, _| !self.cleared.contains(id));
            if let Some(new) = task.owner.as_ref().and_then(|o| self.renames.get(o)) {
                task.owner = Some(new.clone());
            }
            let operators = std::mem::take(&mut task.operators);
            task.operators =
                operators.into_iter().map(|(id, s)| (self.renames.get(&id).cloned().unwrap_or(id), s)).collect();
        }
    }

    /// One line per part: its verdict, name, id and why.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        for e in &self.entries {
            let was = e.was.as_ref().map(|w| format!(", was {w}")).unwrap_or_default();
            let _ = write!(out, "  {:<9} {} (id {}{was})", e.verdict.word(), e.name, e.id);
            if let Some(why) = e.verdict.why() {
                let _ = write!(out, ": {why}");
            }
            out.push('\n');
        }
        out
    }

    /// How many parts have each verdict, as `3 kept, 1 new`.
    pub fn summary(&self) -> String {
        let mut counts: Vec<(&str, usize)> = Vec::new();
        for e in &self.entries {
            match counts.iter_mut().find(|(w, _)| *w == e.verdict.word()) {
                Some((_, n)) => *n += 1,
                None => counts.push((e.verdict.word(), 1)),
            }
        }
        counts.iter().map(|(w, n)| format!("{n} {w}")).collect::<Vec<_>>().join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::StatePart;

    fn part(slot: &str, shape: &str, output: &str) -> StatePart {
        StatePart::new(slot.into(), shape.into(), output.into(), format!("op at {slot}"))
    }

    fn old_part(p: &StatePart, has_state: bool) -> OldPart {
        OldPart {
            id: p.id.clone(),
            slot: p.slot.clone(),
            name: p.name.clone(),
            has_state,
            shape: Some((p.shape.clone(), p.output.clone())),
        }
    }

    fn plan(parts: Vec<StatePart>, ignore_unclaimed: bool) -> PlanState {
        PlanState { parts, ignore_unclaimed, ..Default::default() }
    }

    fn words(up: &Upgrade) -> Vec<&'static str> {
        up.entries.iter().map(|e| e.verdict.word()).collect()
    }

    const CHECKPOINT: Taken = Taken { published: false };
    const SAVEPOINT: Taken = Taken { published: true };

    #[test]
    fn unchanged_parts_are_kept_and_new_ones_start_empty() {
        let (agg, sink) = (part("out/0", "agg", "[a]"), part("sink out", "filesystem", ""));
        let added = part("out2/0", "agg", "[a]");
        let old = [old_part(&agg, true), old_part(&sink, true)];
        let up = verdicts(&old, &plan(vec![agg, sink, added], false), CHECKPOINT);
        assert_eq!(words(&up), ["kept", "kept", "new"]);
        assert_eq!(up.refusal(), None);
        assert_eq!(up.summary(), "2 kept, 1 new");
    }

    #[test]
    fn a_changed_operator_is_rebuilt_by_replay_and_refused_where_its_input_cannot_be_read_again() {
        let (scan, sink) = (part("scan bid", "kafka", "[a]"), part("sink out", "filesystem", ""));
        let (was, now) = (part("out/0", "agg max", "[m]"), part("out/0", "agg sum", "[m]"));
        let old = [old_part(&scan, true), old_part(&was, true), old_part(&sink, true)];
        let mut p = plan(vec![scan.clone(), now.clone(), sink.clone()], false);
        p.branches = vec![vec![scan.id.clone(), now.id.clone(), sink.id.clone()]];
        let up = verdicts(&old, &p, CHECKPOINT);
        assert_eq!(words(&up), ["rebuilt", "rebuilt", "kept"]);
        assert_eq!(up.refusal(), None);
        let why = up.entries[1].verdict.why().unwrap_or_default();
        for s in [was.id.as_str(), "has changed", "agg max", "agg sum", "reading its input again"] {
            assert!(why.contains(s), "{s} missing: {why}");
        }
        let mut restored = Restored { epoch: 1, version: 2, ..Default::default() };
        let mut task = crate::checkpoint::TaskState { owner: Some(scan.id.clone()), ..Default::default() };
        task.operators.insert(was.id.clone(), Default::default());
        restored.tasks.insert("t0".into(), task);
        up.apply(&mut restored);
        assert!(restored.tasks["t0"].operators.is_empty(), "the changed state is not restored");
        assert_eq!(
            (restored.replay.iter().collect::<Vec<_>>(), restored.suppress.iter().collect::<Vec<_>>()),
            (vec![&scan.id], vec![&sink.id])
        );
        // A scan that cannot read its input again: refused, both shapes and the reason named.
        p.unreplayable.insert(scan.id.clone(), "it starts at the latest offset".into());
        let up = verdicts(&old, &p, CHECKPOINT);
        let err = up.refusal().expect("refused");
        for s in [now.id.as_str(), was.id.as_str(), "agg max", "agg sum", "table 'bid'", "latest offset"] {
            assert!(err.contains(s), "{s} missing: {err}");
        }
        // Without state, nothing is lost: new.
        let up = verdicts(&[old_part(&was, false)], &plan(vec![now], false), CHECKPOINT);
        assert_eq!((words(&up), up.refusal()), (vec!["new"], None));
    }

    #[test]
    fn insert_sharing_a_scan_with_a_rebuilt_one_is_rebuilt_with_it_and_others_are_kept() {
        let (bid, person) = (part("scan bid", "nexmark", "[a]"), part("scan person", "nexmark", "[b]"));
        let (grp, grp2) = (part("g/0", "agg count", "[a]"), part("g/0", "agg sum", "[a]"));
        let (win, other) = (part("w/0", "window", "[a]"), part("p/0", "dedup", "[b]"));
        let sinks = [part("sink g", "blackhole", ""), part("sink w", "blackhole", ""), part("sink p", "blackhole", "")];
        let old: Vec<OldPart> = [&bid, &person, &grp, &win, &other, &sinks[0], &sinks[1], &sinks[2]]
            .iter()
            .map(|p| old_part(p, true))
            .collect();
        let mut p = plan(
            vec![
                bid.clone(),
                grp2.clone(),
                sinks[0].clone(),
                win.clone(),
                sinks[1].clone(),
                person.clone(),
                other.clone(),
                sinks[2].clone(),
            ],
            false,
        );
        p.branches = vec![
            vec![bid.id.clone(), grp2.id.clone(), sinks[0].id.clone()],
            vec![bid.id.clone(), win.id.clone(), sinks[1].id.clone()],
            vec![person.id.clone(), other.id.clone(), sinks[2].id.clone()],
        ];
        let up = verdicts(&old, &p, CHECKPOINT);
        assert_eq!(words(&up), ["rebuilt", "rebuilt", "kept", "rebuilt", "kept", "kept", "kept", "kept"]);
        assert!(up.entries[3].verdict.why().unwrap_or_default().contains("shares its input with"));
        assert_eq!(up.suppress, [sinks[0].id.clone(), sinks[1].id.clone()].into_iter().collect());
        assert_eq!(up.replay, [bid.id.clone()].into_iter().collect());
    }

    #[test]
    fn other_columns_of_the_same_state_are_migrated_under_the_new_id() {
        let (scan, scan2) =
            (part("scan bid", "kafka", "Some([0]) [a]"), part("scan bid", "kafka", "Some([0, 1]) [a,b]"));
        let (agg, agg2) = (part("out/0", "watermark", "[c:Int64]"), part("out/0", "watermark", "[c:Int64,d:Utf8]"));
        let other = part("scan bid", "filesystem", "Some([0]) [a]");
        let up = verdicts(
            &[old_part(&scan, true), old_part(&agg, true)],
            &plan(vec![scan2.clone(), agg2.clone()], false),
            CHECKPOINT,
        );
        assert_eq!(words(&up), ["migrated", "migrated"]);
        assert_eq!(up.entries[0].was.as_deref(), Some(scan.id.as_str()));
        let mut restored = Restored { epoch: 1, version: 2, ..Default::default() };
        let mut task = crate::checkpoint::TaskState { owner: Some(scan.id.clone()), ..Default::default() };
        task.operators.insert(agg.id.clone(), Default::default());
        restored.tasks.insert("t0".into(), task);
        up.apply(&mut restored);
        assert_eq!(restored.tasks["t0"].owner.as_deref(), Some(scan2.id.as_str()));
        assert!(restored.tasks["t0"].operators.contains_key(&agg2.id));
        // Another connector's position means nothing to this one; an aggregate grouping by
        // another column of the same type is another aggregate.
        let up = verdicts(&[old_part(&scan, true)], &plan(vec![other], false), CHECKPOINT);
        assert_eq!(words(&up), ["refused"]);
        let (by_a, by_b) =
            (part("out/1", "agg keys 1", "[a:Int64,c:Int64]"), part("out/1", "agg keys 1", "[b:Int64,c:Int64]"));
        assert_eq!(words(&verdicts(&[old_part(&by_a, true)], &plan(vec![by_b], false), CHECKPOINT)), ["rebuilt"]);
    }

    #[test]
    fn unclaimed_state_and_replaced_sinks_are_refused_unless_dropping_is_asked_for() {
        let gone = part("out/3", "top n", "[a]");
        let (file, collect) = (part("sink out", "filesystem", ""), part("sink out", "collect", ""));
        let old = [old_part(&gone, true), old_part(&file, true)];
        let up = verdicts(&old, &plan(vec![collect.clone()], false), CHECKPOINT);
        let err = up.refusal().expect("unclaimed");
        assert!(err.contains(&gone.id) && err.contains("claims it"), "{err}");
        assert!(err.contains(&file.id) && err.contains("replaces the sink"), "{err}");
        assert!(err.contains("execution.savepoint.ignore-unclaimed-state"), "{err}");
        assert_eq!(words(&verdicts(&old, &plan(vec![collect.clone()], true), CHECKPOINT)), ["dropped", "dropped"]);
        // After a savepoint the sink's pre-commits are published: only the operator's state
        // needs dropping asked for.
        assert_eq!(words(&verdicts(&old, &plan(vec![collect], false), SAVEPOINT)), ["new", "refused"]);
    }
}
