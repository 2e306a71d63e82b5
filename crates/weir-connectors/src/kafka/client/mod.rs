//! Weir's own Kafka client, for the few requests librdkafka cannot make (ending another
//! producer's transaction, listing transactions: [`super::txn`], [`super::recovery`]). It
//! connects exactly as the table's librdkafka clients do: the same bootstrap servers and the
//! same `security.protocol`, SASL and TLS settings, so that recovery works on a secured
//! cluster as the job itself does.

mod connection;
mod sasl;
pub mod security;

use std::sync::Arc;
use std::time::Duration;

use rdkafka::ClientConfig;
use weir_core::{Result, TableDef, WeirError};

pub use connection::{error_name, Connection};
pub use security::Security;

/// A cluster as one table (or a worker's template table) reaches it.
#[derive(Clone, Debug)]
pub struct Cluster {
    bootstrap: Vec<String>,
    security: Arc<Security>,
}

impl Cluster {
    /// From librdkafka properties (`bootstrap.servers`, `security.protocol`, `sasl.*`,
    /// `ssl.*`). `what` names where they came from, for errors.
    pub fn from_config(config: &ClientConfig, what: &str) -> Result<Self> {
        let security = security::parse(&|key| config.get(key).map(str::to_string))
            .map_err(|e| WeirError::user(format!("{what}: 'properties.{}': {}", e.property, e.message)))?;
        let bootstrap: Vec<String> = config
            .get("bootstrap.servers")
            .unwrap_or_default()
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        if bootstrap.is_empty() {
            return Err(WeirError::user(format!("{what}: 'properties.bootstrap.servers' names no server")));
        }
        Ok(Self { bootstrap, security: Arc::new(security) })
    }

    /// From a table's `properties.*`; errors carry the option's line and column.
    pub fn of_table(table: &TableDef) -> Result<Self> {
        let properties = super::properties(table)?;
        let security = security::parse(&|key| properties.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone()))
            .map_err(|e| {
                let option = format!("properties.{}", e.property);
                let location =
                    table.options.location(&option).or_else(|| table.options.location("properties.sasl.jaas.config"));
                WeirError::user(format!("table '{}': '{option}': {}", table.name, e.message)).at(location)
            })?;
        let bootstrap =
            super::bootstrap(table)?.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
        Ok(Self { bootstrap, security: Arc::new(security) })
    }

    /// A plaintext cluster (tests, tools).
    pub fn plaintext(bootstrap: &[String]) -> Self {
        Self { bootstrap: bootstrap.to_vec(), security: Arc::new(Security::plaintext()) }
    }

    pub fn bootstrap(&self) -> &[String] {
        &self.bootstrap
    }

    pub fn connect(&self, broker: &str, timeout: Duration) -> Result<Connection> {
        Connection::open(broker, &self.security, timeout)
    }
}
