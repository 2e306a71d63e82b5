//! Where a `jdbc` table's server is: its URL (`jdbc:postgresql://host:port/db?user=…`, or a
//! `postgres://user:password@host:port/db` URL) and the `username`/`password` options.

use std::time::Duration;

use weir_core::{Result, TableDef, WeirError};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub host: String,
    pub port: u16,
    pub database: String,
    pub user: String,
    password: Option<String>,
    connect_timeout: Duration,
}

impl std::fmt::Debug for Endpoint {
    // Never the password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.describe())
    }
}

impl Endpoint {
    pub fn parse(table: &TableDef) -> Result<Self> {
        let url = table.options.required(&table.name, "url")?;
        let bad = |why: &str| {
            WeirError::user(format!(
                "table '{}': 'url' = '{}' {why}; write it as 'jdbc:postgresql://host:port/database' (or \
                 'postgres://user:password@host:port/database')",
                table.name,
                redact(url)
            ))
            .at(table.options.location("url"))
        };
        let rest = url.strip_prefix("jdbc:").unwrap_or(url);
        let rest = match rest.split_once("://") {
            Some(("postgresql" | "postgres", rest)) => rest,
            Some((scheme, _)) => {
                return Err(bad(&format!("is a '{scheme}' URL: Weir's jdbc connector writes PostgreSQL only")))
            }
            None => return Err(bad("is not a URL")),
        };
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, database) = rest.split_once('/').unwrap_or((rest, ""));
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let (host, port) = match hostport.strip_prefix('[') {
            // [::1]:5432
            Some(v6) => {
                let (h, after) = v6.split_once(']').ok_or_else(|| bad("has an unclosed '['"))?;
                (h, after.strip_prefix(':'))
            }
            None => match hostport.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (hostport, None),
            },
        };
        if host.is_empty() {
            return Err(bad("names no host"));
        }
        let port = match port {
            None | Some("") => 5432,
            Some(p) => p.parse::<u16>().map_err(|_| bad(&format!("has port '{p}', which is not a port number")))?,
        };
        if database.is_empty() {
            return Err(bad("names no database"));
        }
        let mut user = userinfo.map(|u| u.split_once(':').map_or(u, |(name, _)| name).to_string());
        let mut password = userinfo.and_then(|u| u.split_once(':').map(|(_, p)| p.to_string()));
        let mut connect_timeout = CONNECT_TIMEOUT;
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match key {
                "user" => user = Some(value.to_string()),
                "password" => password = Some(value.to_string()),
                "connectTimeout" | "connect_timeout" => {
                    let s = value.parse::<u64>().map_err(|_| bad(&format!("has {key}={value}, not seconds")))?;
                    connect_timeout = Duration::from_secs(s.max(1));
                }
                "sslmode" if matches!(value, "disable" | "allow" | "prefer") => {}
                "sslmode" | "ssl" => {
                    return Err(bad(&format!("asks for {key}={value}: Weir connects without TLS (sslmode=disable)")))
                }
                "ApplicationName" | "applicationName" => {}
                other => {
                    return Err(bad(&format!(
                        "has the parameter '{other}', which Weir does not read (it reads user, password, \
                         connectTimeout, sslmode=disable)"
                    )))
                }
            }
        }
        if let Some(u) = table.options.get("username") {
            user = Some(u.to_string());
        }
        if let Some(p) = table.options.get("password") {
            password = Some(p.to_string());
        }
        let user = user.ok_or_else(|| {
            WeirError::user(format!("table '{}' needs the option 'username' (or a user in its 'url')", table.name))
        })?;
        Ok(Self { host: host.to_string(), port, database: database.to_string(), user, password, connect_timeout })
    }

    /// `user@host:port/database`, for messages.
    pub fn describe(&self) -> String {
        format!("{}@{}:{}/{}", self.user, self.host, self.port, self.database)
    }

    /// One connection, its driver spawned on the current runtime. `application` names the
    /// session in `pg_stat_activity` (the exactly-once sink fences its predecessors by it).
    pub async fn connect(&self, application: &str) -> Result<tokio_postgres::Client> {
        let mut config = tokio_postgres::Config::new();
        config
            .host(&self.host)
            .port(self.port)
            .dbname(&self.database)
            .user(&self.user)
            .application_name(application)
            .connect_timeout(self.connect_timeout);
        if let Some(p) = &self.password {
            config.password(p);
        }
        let (client, connection) = config
            .connect(tokio_postgres::NoTls)
            .await
            .map_err(|e| WeirError::external(format!("PostgreSQL: cannot connect to {}: {e}", self.describe())))?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                log::debug!("PostgreSQL connection closed: {e}");
            }
        });
        Ok(client)
    }
}

/// The URL without its password, for messages.
fn redact(url: &str) -> String {
    let mut out = url.to_string();
    if let Some(at) = url.rfind('@') {
        if let Some(scheme_end) = url.find("://") {
            let userinfo = &url[scheme_end + 3..at];
            if let Some((user, _)) = userinfo.split_once(':') {
                out = format!("{}{user}:***{}", &url[..scheme_end + 3], &url[at..]);
            }
        }
    }
    if let Some(i) = out.find("password=") {
        let end = out[i..].find('&').map_or(out.len(), |e| i + e);
        out.replace_range(i + "password=".len()..end, "***");
    }
    out
}
