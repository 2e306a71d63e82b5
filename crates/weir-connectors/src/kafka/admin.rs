//! Topics made and removed for a table (`weir verify`'s scratch copies of Kafka sinks).

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use weir_core::{Result, TableDef, WeirError};

use super::source::kafka_error;

const TIMEOUT: Duration = Duration::from_secs(10);

fn admin(table: &TableDef) -> Result<AdminClient<DefaultClientContext>> {
    super::client_config(table, &[])?.create().map_err(|e| kafka_error("cannot create an admin client", e))
}

/// Create `topic` with as many partitions as the table's own topic has (one if it has none
/// yet), on the table's brokers.
pub async fn copy_topic(table: &TableDef, topic: &str) -> Result<()> {
    let own = super::topic(table)?;
    let partitions = {
        let mut config = super::client_config(table, &[])?;
        config.set("group.id", format!("weir-admin-{}", table.name));
        let consumer: BaseConsumer = config.create().map_err(|e| kafka_error("cannot create a consumer", e))?;
        let metadata = super::blocking(|| consumer.fetch_metadata(Some(&own), TIMEOUT))
            .map_err(|e| kafka_error(&format!("cannot read the metadata of topic '{own}'"), e))?;
        metadata
            .topics()
            .iter()
            .find(|t| t.name() == own && t.error().is_none())
            .map(|t| t.partitions().len() as i32)
            .filter(|n| *n > 0)
            .unwrap_or(1)
    };
    let new = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
    let results = admin(table)?
        .create_topics([&new], &AdminOptions::new().operation_timeout(Some(TIMEOUT)))
        .await
        .map_err(|e| kafka_error(&format!("cannot create topic '{topic}'"), e))?;
    for result in results {
        result.map_err(|(t, e)| WeirError::external(format!("Kafka: cannot create topic '{t}': {e}")))?;
    }
    Ok(())
}

/// Delete `topics` from the table's brokers.
pub async fn delete_topics(table: &TableDef, topics: &[String]) -> Result<()> {
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    let results = admin(table)?
        .delete_topics(&names, &AdminOptions::new().operation_timeout(Some(TIMEOUT)))
        .await
        .map_err(|e| kafka_error("cannot delete topics", e))?;
    for result in results {
        result.map_err(|(t, e)| WeirError::external(format!("Kafka: cannot delete topic '{t}': {e}")))?;
    }
    Ok(())
}
