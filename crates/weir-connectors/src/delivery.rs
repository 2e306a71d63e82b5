//! `'sink.delivery-guarantee'`, as the Kafka and jdbc sinks read it.

use weir_core::{Result, TableDef, WeirError};

/// `'sink.delivery-guarantee'`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Two-phase commit with checkpoints (Kafka transactions, prepared transactions).
    ExactlyOnce,
    /// Flushed at every checkpoint barrier; a replay writes again.
    AtLeastOnce,
    /// Flushed when convenient.
    None,
}

pub(crate) fn delivery(table: &TableDef) -> Result<Delivery> {
    Ok(match table.options.get("sink.delivery-guarantee").unwrap_or("at-least-once") {
        "exactly-once" => Delivery::ExactlyOnce,
        "at-least-once" => Delivery::AtLeastOnce,
        "none" => Delivery::None,
        other => {
            return Err(WeirError::user(format!(
            "table '{}': 'sink.delivery-guarantee' must be 'exactly-once', 'at-least-once' or 'none', not '{other}'",
            table.name
        ))
            .at(table.options.location("sink.delivery-guarantee")))
        }
    })
}
