//! A Kafka table's start and end as a scan reads it: `'scan.startup.mode'` (and whether a
//! second read starts where the first did, for a rebuild by replay) and
//! `'scan.bounded.specific-offsets'`.

use std::collections::BTreeMap;

use weir_core::{Result, TableDef, WeirError};

/// `'scan.startup.mode'`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Startup {
    Earliest,
    Latest,
    Timestamp(i64),
    GroupOffsets,
}

pub(crate) fn startup(table: &TableDef) -> Result<Startup> {
    // An upsert-kafka table is the whole topic, as in Flink: from the earliest offset.
    let default =
        if table.options.get("connector") == Some("upsert-kafka") { "earliest-offset" } else { "group-offsets" };
    let mode = table.options.get("scan.startup.mode").unwrap_or(default);
    Ok(match mode {
        "earliest-offset" => Startup::Earliest,
        "latest-offset" => Startup::Latest,
        "group-offsets" => Startup::GroupOffsets,
        "timestamp" => {
            let ms = table.options.required(&table.name, "scan.startup.timestamp-millis")?;
            Startup::Timestamp(ms.parse().map_err(|_| {
                WeirError::user(format!(
                    "table '{}': 'scan.startup.timestamp-millis' must be a number, not '{ms}'",
                    table.name
                ))
                .at(table.options.location("scan.startup.timestamp-millis"))
            })?)
        }
        other => {
            return Err(WeirError::user(format!(
                "table '{}': 'scan.startup.mode' must be 'earliest-offset', 'latest-offset', 'group-offsets' or \
                 'timestamp', not '{other}'",
                table.name
            ))
            .at(table.options.location("scan.startup.mode")))
        }
    })
}

/// Whether a second read of `table` starts where the first did: from the earliest offset or a
/// timestamp it does; from the latest offset or a group's offsets it starts elsewhere.
pub(crate) fn replays(table: &TableDef) -> std::result::Result<(), String> {
    match startup(table).map_err(|e| e.to_string())? {
        Startup::Earliest | Startup::Timestamp(_) => Ok(()),
        Startup::Latest => {
            Err("it starts at the latest offset, so a second read would not see what the first saw".into())
        }
        Startup::GroupOffsets => Err(
            "it starts at the group's offsets, which moved since, so a second read would not see what the first saw \
                 (set 'scan.startup.mode' = 'earliest-offset')"
                .into(),
        ),
    }
}

/// `'scan.bounded.specific-offsets'`, Flink's `partition:0,offset:42;partition:1,offset:300`:
/// the offset each partition ends before.
pub(crate) fn specific_offsets(table: &TableDef) -> Result<BTreeMap<i32, i64>> {
    let key = "scan.bounded.specific-offsets";
    let text = table.options.required(&table.name, key)?;
    if table.options.get("topic").is_none() {
        return Err(WeirError::user(format!("table '{}': '{key}' needs a single 'topic'", table.name))
            .at(table.options.location(key)));
    }
    let bad = |part: &str| {
        WeirError::user(format!(
            "table '{}': '{key}' must read like 'partition:0,offset:42;partition:1,offset:300', not '{part}'",
            table.name
        ))
        .at(table.options.location(key))
    };
    let mut ends = BTreeMap::new();
    for part in text.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let (partition, offset) = part.split_once(',').ok_or_else(|| bad(part))?;
        let partition = partition.trim().strip_prefix("partition:").and_then(|p| p.trim().parse::<i32>().ok());
        let offset = offset.trim().strip_prefix("offset:").and_then(|o| o.trim().parse::<i64>().ok());
        match (partition, offset) {
            (Some(p), Some(o)) if p >= 0 && o >= 0 => {
                ends.insert(p, o);
            }
            _ => return Err(bad(part)),
        }
    }
    Ok(ends)
}
