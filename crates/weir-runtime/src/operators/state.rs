//! Where an operator task's keyed state lives: chosen by the runtime (the job's state
//! backend, its key groups, the groups this task owns) and handed to the operator, which
//! declares its tables and opens them here.

use std::ops::Range;

use weir_core::Result;
use weir_state::{Backend, KeyGroups, StateTables, TableDecl};

#[derive(Debug, Clone)]
pub struct StateContext {
    pub backend: Backend,
    pub key_groups: KeyGroups,
    /// The key groups of the task.
    pub owned: Range<u16>,
}

impl StateContext {
    /// In memory, owning every key group: for tests and single-task use.
    pub fn memory() -> Self {
        let key_groups = KeyGroups::default();
        Self { backend: Backend::Memory, key_groups, owned: key_groups.range_of(0, 1) }
    }

    /// The operator's declared tables, empty.
    pub fn open(&self, decls: &[TableDecl]) -> Result<StateTables> {
        StateTables::open(decls, self.key_groups, self.owned.clone(), &self.backend)
    }
}

/// Keys that sort like the numbers: an i64 as 8 big-endian bytes with the sign bit flipped.
pub(crate) fn ordered(n: i64) -> [u8; 8] {
    ((n as u64) ^ (1 << 63)).to_be_bytes()
}

/// The number [`ordered`] encoded.
pub(crate) fn from_ordered(bytes: [u8; 8]) -> i64 {
    (u64::from_be_bytes(bytes) ^ (1 << 63)) as i64
}
