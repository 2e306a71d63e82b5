//! `'connector' = 'nexmark'`: the Nexmark benchmark's events, generated in Weir.
//!
//! The model is Nexmark's (as in Beam and nexmark-flink): one global event sequence where
//! event `n` is a person, an auction or a bid by `n % 50` (1 : 3 : 46), hot auctions (half
//! the bids), hot bidders (three quarters), hot sellers, four hot channels, 100 auctions in
//! flight and 1000 active people. Event `n` happens at 2023-01-01 00:00:00 + `n` ms: event
//! time comes from the event number, never from the wall clock (`'rate'` only paces the
//! generator). Every value is a hash of (seed, event number, field), so the events are the
//! same whatever the parallelism; the source tasks generate interleaved blocks of events
//! ([`crate::generator`]).

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, Int64Array, TimestampMillisecondArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, SchemaRef, TimeUnit};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use weir_core::{Result, Source, Split, TableDef, WeirError};

use crate::generator::{mix, strings, Blocks};

const PROPORTION: u64 = 50;
const FIRST_ID: i64 = 1000;
const BASE_MILLIS: i64 = 1_672_531_200_000; // 2023-01-01 00:00:00 UTC
const HOT_CHANNELS: [&str; 4] = ["Google", "Facebook", "Baidu", "Apple"];
const CITIES: [&str; 10] =
    ["Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond", "Seattle", "Kent", "Cheyenne"];
const STATES: [&str; 6] = ["AZ", "CA", "ID", "OR", "WA", "WY"];
const FIRST_NAMES: [&str; 11] =
    ["Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter"];
const LAST_NAMES: [&str; 9] = ["Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Person,
    Auction,
    Bid,
}

impl Kind {
    /// Columns and their generated types.
    fn columns(self) -> &'static [(&'static str, Col)] {
        use Col::*;
        match self {
            Kind::Bid => &[
                ("auction", Int),
                ("bidder", Int),
                ("price", Int),
                ("channel", Text),
                ("url", Text),
                ("date_time", Time),
                ("extra", Text),
            ],
            Kind::Auction => &[
                ("id", Int),
                ("item_name", Text),
                ("description", Text),
                ("initial_bid", Int),
                ("reserve", Int),
                ("date_time", Time),
                ("expires", Time),
                ("seller", Int),
                ("category", Int),
                ("extra", Text),
            ],
            Kind::Person => &[
                ("id", Int),
                ("name", Text),
                ("email_address", Text),
                ("credit_card", Text),
                ("city", Text),
                ("state", Text),
                ("date_time", Time),
                ("extra", Text),
            ],
        }
    }

    /// The generated column a declared one reads: by Weir's name (`date_time`) or by Flink's
    /// camelCase one (`dateTime`), so that Nexmark's own query text runs unchanged.
    fn column(self, declared: &str) -> Option<usize> {
        self.columns().iter().position(|(name, _)| *name == declared || is_camel_case_of(declared, name))
    }

    /// Offsets within each epoch of 50 events that are of this kind.
    fn offsets(self) -> std::ops::Range<u64> {
        match self {
            Kind::Person => 0..1,
            Kind::Auction => 1..4,
            Kind::Bid => 4..50,
        }
    }

    /// Epochs per generated batch: about 8k rows.
    fn epochs_per_batch(self) -> u64 {
        8192 / (self.offsets().end - self.offsets().start)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Col {
    Int,
    Text,
    Time,
}

const KNOWN: &[&str] = &["connector", "table", "events", "rate", "seed"];

fn kind_of(table: &TableDef) -> Result<Kind> {
    match table.options.required(&table.name, "table")? {
        "bid" => Ok(Kind::Bid),
        "auction" => Ok(Kind::Auction),
        "person" => Ok(Kind::Person),
        other => Err(WeirError::user(format!(
            "table '{}': nexmark 'table' must be 'bid', 'auction' or 'person', not '{other}'",
            table.name
        ))
        .at(table.options.location("table"))),
    }
}

fn number(table: &TableDef, key: &str) -> Result<Option<u64>> {
    match table.options.get(key) {
        None => Ok(None),
        Some(v) => v.trim().parse::<u64>().map(Some).map_err(|_| {
            WeirError::user(format!("table '{}': '{key}' must be a whole number, not '{v}'", table.name))
                .at(table.options.location(key))
        }),
    }
}

/// Check a `nexmark` table: known options, and every declared column is one of the kind's,
/// with a type its values can be cast to.
pub fn validate(table: &TableDef) -> Result<()> {
    table.options.check_known(&table.name, KNOWN)?;
    let kind = kind_of(table)?;
    number(table, "events")?;
    number(table, "seed")?;
    if number(table, "rate")? == Some(0) {
        return Err(WeirError::user(format!("table '{}': 'rate' must be positive", table.name)));
    }
    for field in table.schema.fields() {
        let Some((_, col)) = kind.column(field.name()).map(|c| kind.columns()[c]) else {
            let names: Vec<_> = kind.columns().iter().map(|(n, _)| *n).collect();
            return Err(WeirError::user(format!(
                "table '{}': nexmark {kind:?} events have no column '{}'; they have: {}",
                table.name,
                field.name(),
                names.join(", ")
            )));
        };
        let source_type = generated_type(col);
        if !datafusion::arrow::compute::can_cast_types(&source_type, field.data_type()) {
            return Err(WeirError::user(format!(
                "table '{}': column '{}' is {source_type} in nexmark, which cannot be read as {}",
                table.name,
                field.name(),
                field.data_type()
            )));
        }
    }
    Ok(())
}

/// Whether `camel` is `snake` in camelCase: `initialBid` for `initial_bid`.
fn is_camel_case_of(camel: &str, snake: &str) -> bool {
    let mut expected = String::with_capacity(snake.len());
    let mut upper = false;
    for c in snake.chars() {
        match c {
            '_' => upper = true,
            c if upper => {
                expected.push(c.to_ascii_uppercase());
                upper = false;
            }
            c => expected.push(c),
        }
    }
    camel == expected
}

fn generated_type(col: Col) -> DataType {
    match col {
        Col::Int => DataType::Int64,
        Col::Text => DataType::Utf8,
        Col::Time => DataType::Timestamp(TimeUnit::Millisecond, None),
    }
}

pub struct NexmarkSource {
    kind: Kind,
    seed: u64,
    schema: SchemaRef,
    /// Which generated column each output column is.
    columns: Vec<usize>,
    /// Total events (all kinds) or unbounded.
    events: Option<u64>,
    blocks: Blocks,
}

impl NexmarkSource {
    pub fn new(table: &TableDef, projection: Option<Vec<usize>>, split: Split) -> Result<Self> {
        let kind = kind_of(table)?;
        let projection = projection.unwrap_or_else(|| (0..table.schema.fields().len()).collect());
        let schema = Arc::new(table.schema.project(&projection)?);
        let columns = schema
            .fields()
            .iter()
            .map(|f| {
                kind.column(f.name()).ok_or_else(|| WeirError::user(format!("nexmark has no column '{}'", f.name())))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            kind,
            seed: number(table, "seed")?.unwrap_or(0),
            schema,
            columns,
            events: number(table, "events")?,
            blocks: Blocks::new(split, number(table, "rate")?),
        })
    }

    fn generate(&self, first_epoch: u64, last_epoch: u64) -> Result<RecordBatch> {
        let offsets = self.kind.offsets();
        let last_event = self.events.unwrap_or(u64::MAX);
        let mut ns: Vec<u64> =
            Vec::with_capacity(((last_epoch - first_epoch) * (offsets.end - offsets.start)) as usize);
        for epoch in first_epoch..last_epoch {
            for off in offsets.clone() {
                let n = epoch * PROPORTION + off;
                if n < last_event {
                    ns.push(n);
                }
            }
        }
        let gen = Gen { seed: self.seed, kind: self.kind };
        let columns = self
            .columns
            .iter()
            .zip(self.schema.fields())
            .map(|(&c, field)| {
                let array = gen.column(c, &ns);
                if array.data_type() == field.data_type() {
                    Ok(array)
                } else {
                    Ok(cast(&array, field.data_type())?)
                }
            })
            .collect::<Result<Vec<ArrayRef>>>()?;
        let options = RecordBatchOptions::new().with_row_count(Some(ns.len()));
        Ok(RecordBatch::try_new_with_options(self.schema.clone(), columns, &options)?)
    }
}

#[async_trait]
impl Source for NexmarkSource {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    async fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        let per_batch = self.kind.epochs_per_batch();
        let events = self.events;
        let past_end = move |block: u64| events.is_some_and(|events| block * per_batch * PROPORTION >= events);
        let Some(block) = self.blocks.next(past_end).await else { return Ok(None) };
        let first_epoch = block * per_batch;
        let batch = self.generate(first_epoch, first_epoch + per_batch)?;
        self.blocks.generated(per_batch * PROPORTION);
        Ok(Some(batch))
    }

    crate::generator::rewind_by_blocks!();
}

/// Values of event `n`: pure functions of (seed, n, field).
struct Gen {
    seed: u64,
    kind: Kind,
}

impl Gen {
    fn rand(&self, n: u64, field: u64) -> u64 {
        mix(self.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ mix(n.wrapping_mul(64).wrapping_add(field)))
    }

    fn unit(&self, n: u64, field: u64) -> f64 {
        (self.rand(n, field) >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    fn below(&self, n: u64, field: u64, bound: u64) -> u64 {
        ((self.rand(n, field) as u128 * bound as u128) >> 64) as u64
    }

    fn price(&self, n: u64, field: u64) -> i64 {
        (10f64.powf(self.unit(n, field) * 6.0) * 100.0).round() as i64
    }

    /// Nexmark's nextBase0PersonId for an event of `epoch`.
    fn base0_person(&self, n: u64, field: u64, epoch: u64) -> i64 {
        let people = epoch + 1;
        let active = people.min(1000);
        (people - active + (self.unit(n, field) * (active + 10) as f64) as u64) as i64
    }

    fn column(&self, c: usize, ns: &[u64]) -> ArrayRef {
        let name = self.kind.columns()[c].0;
        let ints =
            |f: &dyn Fn(u64) -> i64| Arc::new(Int64Array::from_iter_values(ns.iter().map(|&n| f(n)))) as ArrayRef;
        let millis = |f: &dyn Fn(u64) -> i64| {
            Arc::new(TimestampMillisecondArray::from_iter_values(ns.iter().map(|&n| f(n)))) as ArrayRef
        };
        let time = |n: u64| BASE_MILLIS + n as i64;
        let epoch = |n: u64| n / PROPORTION;
        match (self.kind, name) {
            (_, "date_time") => millis(&time),
            (Kind::Bid, "auction") => ints(&|n| {
                let last = (epoch(n) * 3 + 2) as i64;
                let id = if self.below(n, 1, 2) > 0 {
                    (last / 100) * 100
                } else {
                    let min = (last - 100).max(0);
                    min + (self.unit(n, 2) * (last - min + 1 + 10) as f64) as i64
                };
                id + FIRST_ID
            }),
            (Kind::Bid, "bidder") => ints(&|n| {
                let e = epoch(n);
                let id = if self.below(n, 3, 4) > 0 { (e as i64 / 100) * 100 + 1 } else { self.base0_person(n, 4, e) };
                id + FIRST_ID
            }),
            (Kind::Bid, "price") => ints(&|n| self.price(n, 5)),
            (Kind::Bid, "channel") => strings(ns, |n, out| match self.channel(n) {
                Ok(hot) => out.extend_from_slice(HOT_CHANNELS[hot].as_bytes()),
                Err(cold) => out.extend_from_slice(format!("channel-{cold}").as_bytes()),
            }),
            (Kind::Bid, "url") => strings(ns, |n, out| {
                let (key, channel_id) = match self.channel(n) {
                    Ok(hot) => (hot as u64, None),
                    Err(cold) => (4 + cold, (cold % 2 == 0).then(|| (cold as u32).reverse_bits() as i32)),
                };
                out.extend_from_slice(b"https://www.nexmark.com/");
                for part in 0..3 {
                    letters(mix(self.seed ^ mix(key * 4 + part + 1)), 5, out);
                    out.push(b'/');
                }
                out.extend_from_slice(b"item.htm?query=1");
                if let Some(id) = channel_id {
                    out.extend_from_slice(format!("&channel_id={}", id.unsigned_abs()).as_bytes());
                }
            }),
            (Kind::Bid, "extra") => strings(ns, |n, out| self.text(n, 8, 68, out)),
            (Kind::Auction, "id") => ints(&|n| (epoch(n) * 3 + n % PROPORTION - 1) as i64 + FIRST_ID),
            (Kind::Auction, "item_name") => strings(ns, |n, out| letters(self.rand(n, 10), 20, out)),
            (Kind::Auction, "description") => strings(ns, |n, out| self.text(n, 11, 100, out)),
            (Kind::Auction, "initial_bid") => ints(&|n| self.price(n, 12)),
            (Kind::Auction, "reserve") => ints(&|n| self.price(n, 12) + self.price(n, 13)),
            (Kind::Auction, "expires") => millis(&|n| time(n) + 1 + (self.unit(n, 14) * 2.0 * 1666.0) as i64),
            (Kind::Auction, "seller") => ints(&|n| {
                let e = epoch(n);
                let id = if self.below(n, 15, 4) > 0 { (e as i64 / 100) * 100 } else { self.base0_person(n, 16, e) };
                id + FIRST_ID
            }),
            (Kind::Auction, "category") => ints(&|n| 10 + self.below(n, 17, 5) as i64),
            (Kind::Auction, "extra") => strings(ns, |n, out| self.text(n, 18, 324, out)),
            (Kind::Person, "id") => ints(&|n| epoch(n) as i64 + FIRST_ID),
            (Kind::Person, "name") => strings(ns, |n, out| {
                out.extend_from_slice(FIRST_NAMES[self.below(n, 20, 11) as usize].as_bytes());
                out.push(b' ');
                out.extend_from_slice(LAST_NAMES[self.below(n, 21, 9) as usize].as_bytes());
            }),
            (Kind::Person, "email_address") => strings(ns, |n, out| {
                letters(self.rand(n, 22), 7, out);
                out.push(b'@');
                letters(self.rand(n, 23), 5, out);
                out.extend_from_slice(b".com");
            }),
            (Kind::Person, "credit_card") => strings(ns, |n, out| {
                for group in 0..4 {
                    if group > 0 {
                        out.push(b' ');
                    }
                    out.extend_from_slice(format!("{:04}", self.below(n, 24 + group, 10_000)).as_bytes());
                }
            }),
            (Kind::Person, "city") => {
                strings(ns, |n, out| out.extend_from_slice(CITIES[self.below(n, 28, 10) as usize].as_bytes()))
            }
            (Kind::Person, "state") => {
                strings(ns, |n, out| out.extend_from_slice(STATES[self.below(n, 29, 6) as usize].as_bytes()))
            }
            (Kind::Person, "extra") => strings(ns, |n, out| self.text(n, 30, 125, out)),
            _ => Arc::new(Int64Array::from(vec![None::<i64>; ns.len()])),
        }
    }

    /// A hot channel (index) half of the time, else a cold one (0..10000).
    fn channel(&self, n: u64) -> std::result::Result<usize, u64> {
        if self.below(n, 6, 2) > 0 {
            Ok(self.below(n, 7, 4) as usize)
        } else {
            Err(self.below(n, 7, 10_000))
        }
    }

    /// Nexmark's padding text: `avg` ± 20% letters with about one space in ten.
    fn text(&self, n: u64, field: u64, avg: u64, out: &mut Vec<u8>) {
        let delta = avg / 5;
        let len = avg - delta + self.below(n, field, 2 * delta + 1);
        let mut left = len as usize;
        let mut k = 0;
        while left > 0 {
            let take = left.min(8);
            let bits = self.rand(n, field + 32 + k * 7);
            for i in 0..take {
                let b = (bits >> (8 * i)) as u8;
                out.push(if b < 26 { b' ' } else { b'a' + b % 26 });
            }
            left -= take;
            k += 1;
        }
    }
}

/// `len` lowercase letters from the bits of `seed`.
fn letters(seed: u64, len: usize, out: &mut Vec<u8>) {
    let mut bits = seed;
    for i in 0..len {
        if i > 0 && i % 8 == 0 {
            bits = mix(bits);
        }
        out.push(b'a' + (bits >> (8 * (i % 8))) as u8 % 26);
    }
}
