//! The group aggregate's `FIRST_VALUE`, `LAST_VALUE`, `LISTAGG`, `JSON_ARRAYAGG` and
//! `JSON_OBJECTAGG`: results made of the values themselves, in the order they came.
//!
//! Over an appending input FIRST_VALUE, LAST_VALUE, LISTAGG and JSON_ARRAYAGG need no more
//! than their result: a value is taken (the first), replaces it (the last) or is appended.
//! Over an updating input, and for JSON_OBJECTAGG always (its keys are sorted and checked for
//! repeats), a group keeps its values by arrival in the `bag` table; a chunk reads the bags of
//! the groups it touches once, applies its rows in order (an insert appends, a retraction
//! takes out the first equal value, as Flink's `…WithRetract` functions and `List.remove`
//! do), writes what changed and computes the result from what is left.
//!
//! Flink orders FIRST_VALUE's and LAST_VALUE's values by the wall clock at arrival
//! (`System.currentTimeMillis()`), which ties within a millisecond and differs on replay;
//! Weir orders by arrival alone. NULL values are skipped, as in Flink, except by the JSON
//! aggregates' `NULL ON NULL`.

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;

use super::*;
use crate::operators::aggregates::BagKind;

/// The sequence number a value is filed under in the bag (big-endian, after the key).
fn seq_of(sort: &[u8]) -> Result<u64> {
    sort.try_into()
        .map(u64::from_be_bytes)
        .map_err(|_| WeirError::internal("a group aggregate's bag of values in a checkpoint is damaged"))
}

impl GroupAggregate {
    /// Whether aggregate `kind` keeps a group's values in the `bag` table.
    pub(super) fn keeps_bag(&self, kind: AggKind) -> bool {
        match kind {
            AggKind::Bag(BagKind::JsonObject { .. }) => true,
            AggKind::Bag(_) => self.spec.retracting_input,
            _ => false,
        }
    }

    /// Each row's value as stored (`None`: the row adds nothing): row format for FIRST_VALUE
    /// and LAST_VALUE, text for LISTAGG and JSON_ARRAYAGG, `key length | key | JSON` for
    /// JSON_OBJECTAGG.
    fn items(&self, a: usize, kind: BagKind, batch: &RecordBatch) -> Result<Vec<Option<Vec<u8>>>> {
        let def = &self.aggs[a].def;
        let arg = def.arg.map(|c| batch.column(c).clone()).ok_or_else(|| WeirError::internal("no argument"))?;
        let rows = batch.num_rows();
        let text = |column: &ArrayRef| -> Result<ArrayRef> { Ok(cast(column, &DataType::Utf8)?) };
        Ok(match kind {
            BagKind::FirstValue | BagKind::LastValue => {
                let converter = self.aggs[a].rows.as_ref().ok_or_else(|| WeirError::internal("no row format"))?;
                let encoded = converter.convert_columns(std::slice::from_ref(&arg))?;
                (0..rows).map(|i| arg.is_valid(i).then(|| encoded.row(i).data().to_vec())).collect()
            }
            BagKind::ListAgg => {
                let arg = text(&arg)?;
                let s = arg.as_string::<i32>();
                (0..rows).map(|i| s.is_valid(i).then(|| s.value(i).as_bytes().to_vec())).collect()
            }
            BagKind::JsonArray { absent_on_null } => {
                let arg = text(&arg)?;
                let s = arg.as_string::<i32>();
                (0..rows)
                    .map(|i| match s.is_valid(i) {
                        true => Some(s.value(i).as_bytes().to_vec()),
                        false => (!absent_on_null).then(|| b"null".to_vec()),
                    })
                    .collect()
            }
            BagKind::JsonObject { absent_on_null } => {
                let (keys, values) = (text(&arg)?, def.second.map(|c| text(batch.column(c))).transpose()?);
                let values = values.ok_or_else(|| WeirError::internal("JSON_OBJECTAGG without its value"))?;
                let (keys, values) = (keys.as_string::<i32>(), values.as_string::<i32>());
                let mut out = Vec::with_capacity(rows);
                for i in 0..rows {
                    if !keys.is_valid(i) {
                        return Err(WeirError::user("JSON_OBJECTAGG: a key is NULL (keys must not be NULL)"));
                    }
                    let value = match values.is_valid(i) {
                        true => values.value(i),
                        false if absent_on_null => {
                            out.push(None);
                            continue;
                        }
                        false => "null",
                    };
                    let key = keys.value(i).as_bytes();
                    let mut item = (key.len() as u32).to_le_bytes().to_vec();
                    item.extend_from_slice(key);
                    item.extend_from_slice(value.as_bytes());
                    out.push(Some(item));
                }
                out
            }
        })
    }

    /// Aggregate `a`, a [`BagKind`], over the chunk, into the groups' new states.
    pub(super) fn accumulate_bag(
        &mut self,
        a: usize,
        kind: BagKind,
        batch: &RecordBatch,
        signs: &[i64],
        grouped: &Grouped,
        new: &mut [GroupState],
    ) -> Result<()> {
        let items = self.items(a, kind, batch)?;
        let filter: Option<BooleanArray> = self.aggs[a].def.filter.map(|c| batch.column(c).as_boolean().clone());
        let counted = |i: &usize| {
            signs[*i] != 0 && items[*i].is_some() && filter.as_ref().is_none_or(|f| f.is_valid(*i) && f.value(*i))
        };
        let rows = (0..batch.num_rows()).filter(counted);
        if !self.keeps_bag(AggKind::Bag(kind)) {
            let separator = self.aggs[a].def.separator.clone();
            for i in rows {
                let (Acc::Bag(current), Some(item)) = (&mut new[grouped.of_row[i]].accs[a], &items[i]) else {
                    continue;
                };
                match (kind, current.as_mut()) {
                    (BagKind::FirstValue, Some(_)) => {}
                    (BagKind::ListAgg, Some(text)) => {
                        text.extend_from_slice(separator.as_bytes());
                        text.extend_from_slice(item);
                    }
                    (BagKind::JsonArray { .. }, Some(text)) => {
                        // `[…]` becomes `[…,item]`.
                        text.pop();
                        text.push(b',');
                        text.extend_from_slice(item);
                        text.push(b']');
                    }
                    (BagKind::JsonArray { .. }, None) => *current = Some([b"[", &item[..], b"]"].concat()),
                    _ => *current = Some(item.clone()),
                }
            }
            return Ok(());
        }
        // Each touched group's rows, in order.
        let mut changes: Vec<Vec<(i64, &[u8])>> = vec![Vec::new(); new.len()];
        for i in rows {
            if let Some(item) = &items[i] {
                changes[grouped.of_row[i]].push((signs[i], item));
            }
        }
        let touched: Vec<usize> = (0..new.len()).filter(|g| !changes[*g].is_empty() || new[*g].rows <= 0).collect();
        let bag_keys: Vec<Vec<u8>> = touched.iter().map(|g| value_key(&grouped.keys[*g], a)).collect();
        let lookups: Vec<(u16, &[u8])> =
            touched.iter().zip(&bag_keys).map(|(g, k)| (grouped.key_groups[*g], k.as_slice())).collect();
        let stored = self.tables.entries_many(self.bag, &lookups)?;
        let mut puts: Vec<(u16, Vec<u8>, Vec<u8>)> = Vec::new();
        let mut deletes: Vec<(u16, Vec<u8>)> = Vec::new();
        for ((g, key), entries) in touched.iter().zip(&bag_keys).zip(stored) {
            let group = grouped.key_groups[*g];
            // (sequence, value, stored already)
            let mut bag: Vec<(u64, Vec<u8>, bool)> =
                entries.into_iter().map(|(sort, item)| Ok((seq_of(&sort)?, item, true))).collect::<Result<_>>()?;
            let mut next = bag.last().map_or(0, |(seq, _, _)| seq + 1);
            for (sign, item) in &changes[*g] {
                if *sign > 0 {
                    bag.push((next, item.to_vec(), false));
                    next += 1;
                } else if let Some(at) = bag.iter().position(|(_, v, _)| v.as_slice() == *item) {
                    let (seq, _, stored) = bag.remove(at);
                    if stored {
                        deletes.push((group, StateTables::entry_key(key, &seq.to_be_bytes())));
                    }
                }
            }
            // A group gone takes its values with it.
            if new[*g].rows <= 0 {
                deletes.extend(
                    bag.drain(..)
                        .filter(|(_, _, stored)| *stored)
                        .map(|(seq, _, _)| (group, StateTables::entry_key(key, &seq.to_be_bytes()))),
                );
            }
            for (seq, item, stored) in &bag {
                if !stored {
                    puts.push((group, StateTables::entry_key(key, &seq.to_be_bytes()), item.clone()));
                }
            }
            new[*g].accs[a] = Acc::Bag(self.bag_result(a, kind, &bag)?);
        }
        let mut writes: Vec<Change<'_>> = deletes.iter().map(|(g, k)| (*g, k.as_slice(), None)).collect();
        writes.extend(puts.iter().map(|(g, k, v)| (*g, k.as_slice(), Some(v.as_slice()))));
        self.tables.write(self.bag, &writes)
    }

    /// The result from a group's values, by arrival.
    fn bag_result(&self, a: usize, kind: BagKind, bag: &[(u64, Vec<u8>, bool)]) -> Result<Option<Vec<u8>>> {
        let items = bag.iter().map(|(_, item, _)| item.as_slice());
        Ok(match kind {
            BagKind::FirstValue => bag.first().map(|(_, v, _)| v.clone()),
            BagKind::LastValue => bag.last().map(|(_, v, _)| v.clone()),
            BagKind::ListAgg if bag.is_empty() => None,
            BagKind::ListAgg => Some(items.collect::<Vec<_>>().join(self.aggs[a].def.separator.as_bytes())),
            BagKind::JsonArray { .. } => Some([b"[", &items.collect::<Vec<_>>().join(&b","[..])[..], b"]"].concat()),
            BagKind::JsonObject { .. } => {
                // Sorted by key, as Flink's map writes them; a key twice fails, as in Flink.
                let mut members = std::collections::BTreeMap::new();
                for item in items {
                    let damaged = || WeirError::internal("a JSON_OBJECTAGG value in state is damaged");
                    let len =
                        item.get(..4).and_then(|b| b.try_into().ok()).map(u32::from_le_bytes).ok_or_else(damaged)?;
                    let key = item.get(4..4 + len as usize).ok_or_else(damaged)?;
                    let key = std::str::from_utf8(key).map_err(|_| damaged())?;
                    let value = std::str::from_utf8(&item[4 + len as usize..]).map_err(|_| damaged())?;
                    if members.insert(key, value).is_some() {
                        return Err(WeirError::user(format!(
                            "JSON_OBJECTAGG: key '{key}' is already present. Duplicate keys are not allowed in \
                             JSON_OBJECTAGG"
                        )));
                    }
                }
                let text: Vec<String> = members
                    .into_iter()
                    .map(|(k, v)| format!("{}:{v}", serde_json::Value::String(k.to_string())))
                    .collect();
                Some(format!("{{{}}}", text.join(",")).into_bytes())
            }
        })
    }
}
