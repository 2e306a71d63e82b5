//! The Kafka sink's producers, polled by the task that writes them rather than by a thread of
//! their own.
//!
//! Why not rdkafka's `ThreadedProducer`: its thread polls in calls of 100 ms, and rdkafka
//! 0.39's poll loop spins through the last millisecond of each (it rounds the time left down
//! to a zero wait until its deadline has passed): a percent of a core per producer, at any
//! checkpoint interval. The exactly-once sink keeps a producer per transaction (one being
//! written, the next one's, those waiting for their checkpoint), each with that thread, made
//! and joined at every checkpoint. Nothing needs the events between the sink's own calls:
//! delivery errors are read after a flush, and the producer id once before a pre-commit.
//!
//! librdkafka queues delivery reports and statistics until they are served, and the messages
//! in a report count against its queue limits (and against a flush) until then. So the sink
//! serves them after every chunk it writes, when the queue is full, and while it flushes.
//! Statistics keep coming to producers no row goes through (the next transaction's, those
//! waiting for their commit): the sink serves those at every chunk and barrier, so that a
//! quiet source does not leave them to pile up.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, DeliveryResult, Producer, ProducerContext};
use rdkafka::ClientContext;
use serde::Deserialize;

pub(super) type KafkaProducer = BaseProducer<SinkContext>;

/// Delivery errors and the producer id and epoch, from librdkafka's events.
#[derive(Default)]
pub(super) struct Observed {
    pub error: Option<String>,
    pub producer: Option<(i64, i16)>,
}

#[derive(Clone, Default)]
pub(super) struct SinkContext(pub Arc<Mutex<Observed>>);

/// The part of librdkafka's statistics the sink reads: the idempotent producer's id and epoch
/// (every other field is skipped, not built).
#[derive(Deserialize)]
struct Statistics {
    eos: Option<Eos>,
}

#[derive(Deserialize)]
struct Eos {
    producer_id: i64,
    producer_epoch: i64,
}

impl ClientContext for SinkContext {
    fn stats_raw(&self, statistics: &[u8]) {
        let Ok(mut o) = self.0.lock() else { return };
        if o.producer.is_some() {
            // A producer's id and epoch do not change while it lives.
            return;
        }
        if let Ok(Statistics { eos: Some(eos) }) = serde_json::from_slice::<Statistics>(statistics) {
            if eos.producer_id >= 0 {
                o.producer = Some((eos.producer_id, eos.producer_epoch as i16));
            }
        }
    }
}

impl ProducerContext for SinkContext {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            if let Ok(mut o) = self.0.lock() {
                o.error.get_or_insert_with(|| e.to_string());
            }
        }
    }
}

/// Serve the events librdkafka has ready (delivery reports, statistics, errors) without
/// waiting. A poll without time serves at most one; the in-flight count includes the queued
/// events, and falls with each one served, so this stops at the first poll that served none.
pub(super) fn serve<C: ProducerContext>(producer: &BaseProducer<C>) {
    // Bounded: events arriving as fast as they are served must not keep the task here.
    for _ in 0..1024 {
        let before = producer.in_flight_count();
        producer.poll(Duration::ZERO);
        if producer.in_flight_count() >= before {
            return;
        }
    }
}

/// Wait until everything `producer` was given is delivered (or failed: the delivery callback
/// records it) and its reports served, at most `timeout`.
///
/// Why not `Producer::flush`: it polls in calls of up to 100 ms, with rdkafka's spin through
/// the last millisecond of each. This asks librdkafka once to send what lingers, then serves
/// the reports as they come.
pub(super) fn flush(producer: &KafkaProducer, timeout: Duration) -> std::result::Result<(), KafkaError> {
    let deadline = Instant::now() + timeout;
    match producer.flush(Duration::ZERO) {
        Ok(()) => {}
        Err(KafkaError::Flush(RDKafkaErrorCode::OperationTimedOut)) => {}
        Err(e) => return Err(e),
    }
    loop {
        serve(producer);
        if producer.in_flight_count() == 0 {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(KafkaError::Flush(RDKafkaErrorCode::OperationTimedOut));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}
